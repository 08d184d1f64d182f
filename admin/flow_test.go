package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// call sends body (if not "") to b's admin API with token and returns the
// status and the answer.
func call(t *testing.T, b *bt.Broker, method, path, token, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+b.AdminAddr()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(admin.Header, "test")
	resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(text)
}

// The flow control routes: tenants' settings (the tenant "" too, and a
// name with a slash), limiters, why; the read-only token reads them and
// changes nothing; bad input is a 400 naming it, an unknown job or
// limiter a 404 naming it.
func TestFlowRoutes(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, func(o *admin.Options) { o.Token, o.ReadToken = "full", "look" })
	const read, full = "look", "full"
	tenants := "/api/v1/queues/q/tenants/"
	for _, c := range []struct {
		method, path, token, body string
		want                      int
		in                        string // in the answer
	}{
		{"PATCH", tenants + "acme", read, `{"weight":2}`, 403, "read-only"},
		{"PATCH", tenants + "acme", full, `{"weight":2}`, 200, `"weight": 2`},
		{"PATCH", tenants, full, `{"concurrency":1}`, 200, `"concurrency": 1`},
		{"PATCH", tenants + url.PathEscape("eu/acme"), full, `{"rate":2.5}`, 200, `"rate": 2.5`},
		{"PATCH", tenants + "acme", full, `{"colour":1}`, 400, "colour"},
		{"PATCH", tenants + "acme", full, `{"weight":-1}`, 400, "weight"},
		{"PATCH", tenants + "acme", full, `{"default":["colour"]}`, 400, "colour"},
		{"GET", "/api/v1/queues/q/tenants?limit=0", read, "", 400, "limit"},
		{"GET", "/api/v1/queues/q/tenants?offset=-1", read, "", 400, "offset"},
		{"GET", "/api/v1/queues/q/tenants?offset=1&limit=1", read, "", 200, `"next": 2`},
		{"PUT", "/api/v1/limiters/partner", read, `{"rate":5}`, 403, "read-only"},
		{"PUT", "/api/v1/limiters/partner", full, `{"rate":5,"burst":2}`, 200, `"rate": 5`},
		{"PUT", "/api/v1/limiters/idle", full, `{"burst":2}`, 400, "limit something"},
		{"GET", "/api/v1/limiters", read, "", 200, `"partner"`},
		{"DELETE", "/api/v1/limiters/partner", read, "", 403, "read-only"},
		{"DELETE", "/api/v1/limiters/partner", full, "", 200, `"removed": true`},
		{"DELETE", "/api/v1/limiters/partner", full, "", 404, "partner"},
		{"GET", "/api/v1/jobs/no-such-job/why", read, "", 404, "no-such-job"},
	} {
		code, text := call(t, b, c.method, c.path, c.token, c.body)
		if code != c.want || !strings.Contains(text, c.in) {
			t.Errorf("%s %s %s with %s: %d %s, want %d naming %q", c.method, c.path, c.body, c.token, code, text, c.want, c.in)
		}
	}
	code, text := call(t, b, "GET", "/api/v1/queues/q/tenants", read, "")
	var page broker.TenantPage
	if code != 200 || json.Unmarshal([]byte(text), &page) != nil {
		t.Fatalf("tenants: %d %s", code, text)
	}
	got := map[string]broker.TenantInfo{}
	for _, ti := range page.Tenants {
		got[ti.Name] = ti
	}
	if page.Total != 3 || got["acme"].Weight != 2 || got[""].Concurrency != 1 || got["eu/acme"].Rate != 2.5 {
		t.Fatalf("tenants: %+v, want acme, \"\" and eu/acme with their settings", page)
	}

	// Why, over the Client: a job behind a paused queue.
	c, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr(), Token: read})
	if err != nil {
		t.Fatal(err)
	}
	if code, text := call(t, b, "POST", "/api/v1/queues/q/pause", full, ""); code != 200 {
		t.Fatalf("pause: %d %s", code, text)
	}
	id := bt.Dial(t, b.Frontend(), "c").Request("q", "tenant:acme", []byte("x"))
	w, err := c.Why(t.Context(), id)
	if err != nil || w.Reason != broker.WhyQueuePaused || w.Tenant != "acme" || w.MsgID != id {
		t.Fatalf("why: %+v %v, want queue_paused for acme's job", w, err)
	}
}

// /metrics counts what flow control holds back, over every tenant and
// limiter, with no series of each.
func TestFlowMetrics(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	ctx := t.Context()
	if err := b.SetLimiter(ctx, "api", store.LimiterSettings{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := b.ChangeQueue(ctx, "q", broker.QueueChange{TenantConcurrency: &one}); err != nil {
		t.Fatal(err)
	}
	c := bt.Dial(t, b.Frontend(), "c")
	c.Request("q", "tenant:acme", nil)
	c.Request("q", "tenant:acme", nil) // waits: acme runs one at a time
	c.Request("q", "tenant:b,limit:api", nil)
	c.Request("q", "tenant:c,limit:api", nil) // waits in api's line
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(4)
	bt.Expect[*emqp.Request](w)
	bt.Expect[*emqp.Request](w)
	bt.Eventually(t, "the others held back", func() bool {
		f, err := b.Flow(ctx)
		return err == nil && f.TenantsWithBacklog == 2 && f.LimiterWaiting == 1
	})
	mf := bt.ScrapeMetrics(t, b)
	for name, want := range map[string]float64{
		"emq_tenants_with_backlog": 2,
		"emq_limiters_full":        1,
		"emq_limiter_waiting_jobs": 1,
	} {
		if got := bt.MetricValue(t, mf, name, ""); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := bt.MetricValue(t, mf, "emq_tenants_blocked", ""); got < 1 {
		t.Errorf("emq_tenants_blocked = %v, want acme at least", got)
	}
	for name, fam := range mf {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" || l.GetName() == "limiter" {
					t.Errorf("%s has a series per %s", name, l.GetName())
				}
			}
		}
	}
}
