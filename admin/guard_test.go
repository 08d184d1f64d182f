package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// Any web page the operator's browser shows can send requests to the
// admin API: a form posted to it from another site, or a page that
// pointed its own name at 127.0.0.1 (DNS rebinding). They are refused and
// change nothing, token or no token; the CLI (its tests), a script that
// sends the admin header or JSON, a same-origin page, and the names and
// origins configured are served.
func TestAdminRefusesOtherSites(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "tok"} {
		t.Run("token="+token, func(t *testing.T) {
			t.Parallel()
			b := bt.StartAdmin(t, "", bt.Fast, func(o *admin.Options) {
				o.Token = token
				o.AllowedHosts = []string{"emq.internal"}
				o.AllowedOrigins = []string{"https://dash.example"}
			})
			pending, _, _, dead, _ := jobsInEveryState(t, b)
			changes := []struct{ method, path string }{
				{"POST", "/api/v1/queues/q/purge?confirm=q"},
				{"POST", "/api/v1/jobs/" + dead + "/retry"},
				{"DELETE", "/api/v1/jobs/" + pending},
				{"POST", "/api/v1/compact"},
			}
			form := "application/x-www-form-urlencoded"
			for _, c := range []struct {
				name    string
				host    string
				headers map[string]string
				want    int
			}{
				{"a form posted from another site", "", map[string]string{"Origin": "http://evil.example", "Content-Type": form}, 403},
				{"another site's page with the header", "", map[string]string{"Origin": "http://evil.example", admin.Header: "1"}, 403},
				{"a cross-site fetch", "", map[string]string{"Sec-Fetch-Site": "cross-site", admin.Header: "1"}, 403},
				{"a same-site page of another origin", "", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1", admin.Header: "1"}, 403},
				{"a form without an Origin", "", map[string]string{"Content-Type": "text/plain"}, 403},
				{"a rebinding page", "evil.example:47293", map[string]string{"Origin": "http://evil.example:47293", admin.Header: "1"}, 421},
			} {
				for _, ch := range changes {
					if got := bt.Request(t, b, ch.method, ch.path, token, c.host, c.headers); got != c.want {
						t.Errorf("%s: %s %s: %d, want %d", c.name, ch.method, ch.path, got, c.want)
					}
				}
			}
			// Nothing changed.
			for id, state := range map[string]string{pending: "pending", dead: "dead"} {
				var ji admin.JobInfo
				if code := bt.API(t, b, "GET", "/api/v1/jobs/"+id, token, &ji); code != 200 || ji.State != state {
					t.Fatalf("job %s after the refused requests: %d %q, want it %s", id, code, ji.State, state)
				}
			}
			// A rebinding page cannot read either.
			if got := bt.Request(t, b, "GET", "/api/v1/jobs?payload=1", token, "evil.example", nil); got != http.StatusMisdirectedRequest {
				t.Errorf("a read by a rebinding page: %d, want 421", got)
			}

			own := "http://" + b.AdminAddr()
			for _, c := range []struct {
				name               string
				method, path, host string
				headers            map[string]string
			}{
				{"the dashboard's own page", "POST", "/api/v1/jobs/" + dead + "/retry", "",
					map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin", admin.Header: "1"}},
				{"a script sending JSON", "DELETE", "/api/v1/jobs/" + pending, "",
					map[string]string{"Content-Type": "application/json"}},
				{"an allowed origin behind a proxy", "POST", "/api/v1/compact", "emq.internal",
					map[string]string{"Origin": "https://dash.example", admin.Header: "1"}},
				{"an allowed host name", "GET", "/api/v1/queues", "emq.internal:8080", nil},
				{"localhost", "GET", "/healthz", "localhost:47293", nil},
			} {
				if got := bt.Request(t, b, c.method, c.path, token, c.host, c.headers); got != http.StatusOK {
					t.Errorf("%s: %s %s: %d, want 200", c.name, c.method, c.path, got)
				}
			}
		})
	}
}

func TestAdminAllowListsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		edit func(*admin.Options)
		key  string
	}{
		{func(o *admin.Options) { o.AllowedHosts = []string{"http://emq.internal"} }, "admin-allowed-hosts"},
		{func(o *admin.Options) { o.AllowedOrigins = []string{"emq.internal"} }, "admin-allowed-origins"},
	} {
		o := admin.DefaultOptions()
		c.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%v: want an error naming %s", err, c.key)
		}
	}
}
