package admin_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// The dashboard's calls without a browser (internal/ui drives one).

// httpClient is a client of its own, its connections closed at cleanup.
func httpClient(t *testing.T) *http.Client {
	hc := &http.Client{Transport: &http.Transport{}, Timeout: bt.Wait}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

func TestDashboardFilesAndOverview(t *testing.T) {
	t.Parallel()
	hc := httpClient(t)
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		bt.Fast(o)
		o.ResultTTL = time.Hour
	}, nil)
	pending, inflight, _, dead, worker := jobsInEveryState(t, b)

	resp, err := hc.Get("http://" + b.AdminAddr() + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `<script src="app.js"`) {
		t.Fatalf("/ui/: %d %.200s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	for _, f := range []string{"/ui/app.js", "/ui/app.css", "/ui/vendor/chart.min.js"} {
		r, err := hc.Get("http://" + b.AdminAddr() + f)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("%s: %d", f, r.StatusCode)
		}
	}

	var o admin.Overview
	if code := bt.API(t, b, "GET", "/api/v1/overview", "", &o); code != 200 {
		t.Fatalf("overview: %d", code)
	}
	if len(o.Queues) != 1 || o.Workers != 1 || o.Mode != "single" || !o.Ready || o.Stats.Get("acked") != 4 {
		t.Fatalf("overview %+v", o)
	}
	if q := o.Queues[0]; q.Pending != 1 || q.Delayed != 1 || q.InFlight != 1 || q.Dead != 1 || q.Acked != 4 || q.Failed != 1 {
		t.Fatalf("queue %+v", q)
	}

	// The whole payload, as a download.
	resp, err = hc.Get("http://" + b.AdminAddr() + "/api/v1/jobs/" + pending + "/payload")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "waiting\x00\xff" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("payload download %q %v", body, resp.Header)
	}
	// A done job's result.
	worker.Reply(inflight, []byte("the result"))
	bt.Eventually(t, "done", func() bool {
		var ji admin.JobInfo
		return bt.API(t, b, "GET", "/api/v1/jobs/"+inflight, "", &ji) == 200 && ji.State == "done"
	})
	resp, err = hc.Get("http://" + b.AdminAddr() + "/api/v1/jobs/" + inflight + "/result")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "the result" {
		t.Fatalf("result download %q", body)
	}

	// Bulk remove: a dry run counts, a confirmed one deletes; only pending,
	// dead or done.
	var res admin.BulkResult
	if bt.API(t, b, "POST", "/api/v1/jobs/remove?state=pending&queue=q", "", &res) != 200 || res.Matched != 2 || res.Done != 0 || !res.DryRun {
		t.Fatalf("dry run %+v", res)
	}
	if bt.API(t, b, "POST", "/api/v1/jobs/remove?state=pending&queue=q&msgid_prefix="+pending+"&confirm=yes", "", &res) != 200 || res.Done != 1 {
		t.Fatalf("remove %+v", res)
	}
	if bt.API(t, b, "GET", "/api/v1/jobs/"+pending, "", nil) != 404 {
		t.Fatal("the removed job is still there")
	}
	if bt.API(t, b, "POST", "/api/v1/jobs/remove?state=done&confirm=yes", "", &res) != 200 || res.Done != 1 {
		t.Fatalf("remove done %+v", res)
	}
	if bt.API(t, b, "POST", "/api/v1/jobs/remove?state=dead&confirm=yes", "", &res) != 200 || res.Done != 1 || bt.API(t, b, "GET", "/api/v1/jobs/"+dead, "", nil) != 404 {
		t.Fatalf("remove dead %+v", res)
	}
	if code := bt.API(t, b, "POST", "/api/v1/jobs/remove?state=inflight&confirm=yes", "", nil); code != 400 {
		t.Fatalf("bulk remove of jobs in flight: %d, want 400", code)
	}
}

func TestDashboardOverviewStream(t *testing.T) {
	t.Parallel()
	hc := httpClient(t)
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		bt.Fast(o)
		o.MaxEventListeners = 1
	}, nil)
	c := bt.Dial(t, b.Frontend(), "c")
	c.Request("q", "", []byte("x"))
	if code := bt.API(t, b, "GET", "/api/v1/overview/stream?every=10ms", "", nil); code != 400 {
		t.Errorf("every=10ms: %d, want 400", code)
	}
	resp, err := hc.Get("http://" + b.AdminAddr() + "/api/v1/overview/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if code := bt.API(t, b, "GET", "/api/v1/overview/stream", "", nil); code != 503 {
		t.Errorf("a second stream over max-event-listeners: %d, want 503", code)
	}
	// Overviews come, one a second, until one shows the second job.
	r := bufio.NewReader(resp.Body)
	var got []admin.Overview
	for len(got) == 0 || got[len(got)-1].Queues[0].Pending != 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var o admin.Overview
			if err := json.Unmarshal([]byte(data), &o); err != nil {
				t.Fatal(err)
			}
			got = append(got, o)
			if len(got) == 1 {
				if o.Queues[0].Pending != 1 {
					t.Fatalf("first overview: %+v", o.Queues)
				}
				c.Request("q", "", []byte("y"))
			}
			if len(got) > 10 {
				t.Fatalf("no overview with the second job: %+v", got)
			}
		}
	}
	if !got[len(got)-1].Time.After(got[0].Time) {
		t.Fatalf("overview times do not move: %v then %v", got[0].Time, got[len(got)-1].Time)
	}
}

func TestDashboardSessions(t *testing.T) {
	t.Parallel()
	hc := httpClient(t)
	const full, read = "full-token", "read-token"
	b := bt.StartAdmin(t, "", bt.Fast, func(o *admin.Options) { o.Token, o.ReadToken = full, read })
	base := "http://" + b.AdminAddr()
	post := func(path, body string, cookie *http.Cookie) *http.Response {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	get := func(path string, cookie *http.Cookie) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The pages load without a login; the data does not.
	if get("/ui/", nil) != 200 || get("/ui/session", nil) != 200 || get("/api/v1/overview", nil) != 401 {
		t.Fatal("without a login: the pages should load and the API refuse")
	}
	if resp := post("/ui/login", `{"token":"nope"}`, nil); resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d %v", resp.StatusCode, resp.Cookies())
	}
	login := func(token string) *http.Cookie {
		resp := post("/ui/login", `{"token":"`+token+`"}`, nil)
		if resp.StatusCode != 200 || len(resp.Cookies()) != 1 {
			t.Fatalf("login: %d %v", resp.StatusCode, resp.Cookies())
		}
		c := resp.Cookies()[0]
		if c.Name != admin.SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
			t.Fatalf("session cookie %+v", c)
		}
		return c
	}
	fullSession, readSession := login(full), login(read)
	if get("/api/v1/overview", fullSession) != 200 || get("/api/v1/overview", readSession) != 200 {
		t.Fatal("a session cannot read")
	}
	if resp := post("/api/v1/queues/q/pause", `{}`, readSession); resp.StatusCode != 403 {
		t.Fatalf("read-only session pausing: %d, want 403", resp.StatusCode)
	}
	if resp := post("/api/v1/queues/q/pause", `{}`, fullSession); resp.StatusCode != 200 {
		t.Fatalf("full session pausing: %d", resp.StatusCode)
	}
	// A form's post (no admin header, no JSON) is refused even with the cookie.
	req, _ := http.NewRequest("POST", base+"/api/v1/queues/q/resume", strings.NewReader("a=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(fullSession)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("form post with the session: %d, want 403", resp.StatusCode)
	}
	post("/ui/logout", `{}`, fullSession)
	if get("/api/v1/overview", fullSession) != 401 {
		t.Fatal("the session outlives its logout")
	}
	forged := &http.Cookie{Name: admin.SessionCookie, Value: strings.Repeat("ab", 32)}
	if get("/api/v1/overview", forged) != 401 {
		t.Fatal("a made-up session is accepted")
	}
	// At most MaxSessions: the oldest goes first.
	keep, first := login(full), login(read)
	for range admin.MaxSessions {
		login(read)
	}
	if get("/api/v1/overview", first) != 401 {
		t.Fatal("sessions are not bounded")
	}
	if get("/api/v1/overview", keep) != 200 {
		t.Fatal("read-only logins ended a full session")
	}
}
