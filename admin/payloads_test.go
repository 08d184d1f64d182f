package admin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// Who sees payloads and results (payloads.go, docs/security.md).

// The secrets the jobs carry: no answer to a caller who may not see
// payloads holds them, as text or in base64.
const (
	secretPayload  = "payload-secret-4f1c"
	secretResult   = "result-secret-9a2e"
	secretSchedule = "schedule-secret-77b0"
)

var secrets = []string{secretPayload, secretResult, secretSchedule}

// caller is how a test reaches the admin API: a Bearer token, a
// dashboard session's cookie, or neither.
type caller struct {
	name, token string
	cookie      *http.Cookie
}

// get is a GET of path as c, with its status and body.
func (c caller) get(t *testing.T, b *bt.Broker, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+b.AdminAddr()+path, nil)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// login is a dashboard session of token.
func login(t *testing.T, b *bt.Broker, token string) *http.Cookie {
	t.Helper()
	resp, err := (&http.Client{Timeout: bt.Wait}).Post("http://"+b.AdminAddr()+"/ui/login", "application/json",
		strings.NewReader(`{"token": "`+token+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == admin.SessionCookie {
			return c
		}
	}
	t.Fatalf("login with %q: %d, no session", token, resp.StatusCode)
	return nil
}

// secretJobs stores a pending job and a done one with its result kept,
// both carrying secrets, and a schedule with one; admin is a caller that
// may change things.
type secretJobs struct{ pending, done, schedule string }

func storeSecrets(t *testing.T, b *bt.Broker, adminToken string) secretJobs {
	t.Helper()
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("q")
	var s secretJobs
	s.done = client.Request("q", "", []byte(secretPayload))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	worker.Reply(s.done, []byte(secretResult))
	bt.Eventually(t, "done", func() bool { return b.Stats().Replied == 1 })
	s.pending = client.Request("q", "", []byte(secretPayload))

	req, _ := http.NewRequest("POST", "http://"+b.AdminAddr()+"/api/v1/schedules",
		strings.NewReader(`{"queue": "q", "every": "1h", "payload": "`+secretSchedule+`"}`))
	req.Header.Set("Content-Type", "application/json")
	if adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var si admin.ScheduleInfo
	if err := json.NewDecoder(resp.Body).Decode(&si); err != nil || resp.StatusCode != 200 {
		t.Fatalf("schedule: %d %v", resp.StatusCode, err)
	}
	s.schedule = si.ID
	return s
}

// payloadRoutes are the routes that answer with payload or result bytes
// (and 403 payload_hidden to who may not see them).
func (s secretJobs) payloadRoutes() []string {
	return []string{
		"/api/v1/jobs/" + s.pending + "?payload=1",
		"/api/v1/jobs/" + s.done + "?payload=true",
		"/api/v1/jobs/" + s.pending + "/payload",
		"/api/v1/jobs/" + s.done + "/result",
		"/api/v1/jobs/" + s.done + "/result?wait=1s",
		"/api/v1/schedules/" + s.schedule + "?payload=1",
		"/api/v1/backup",
	}
}

// jsonRoutes are the routes whose JSON shows previews to who may see
// payloads, and payload_hidden to the others.
func (s secretJobs) jsonRoutes() []string {
	return []string{
		"/api/v1/jobs?queue=q",
		"/api/v1/jobs?state=done",
		"/api/v1/jobs/" + s.pending,
		"/api/v1/jobs/" + s.done,
		"/api/v1/schedules",
		"/api/v1/schedules/" + s.schedule,
	}
}

// holdsSecret reports whether body holds one of the secrets, as text or
// in base64.
func holdsSecret(body []byte) bool {
	for _, s := range secrets {
		if bytes.Contains(body, []byte(s)) || bytes.Contains(body, []byte(base64.StdEncoding.EncodeToString([]byte(s)))) {
			return true
		}
	}
	return false
}

// mustHide checks that c sees no payload by any route: 403 payload_hidden
// (or, for a backup with the read-only token, read_only) where the
// answer is payload bytes, sizes and payload_hidden where it is JSON.
func mustHide(t *testing.T, b *bt.Broker, s secretJobs, c caller) {
	t.Helper()
	for _, path := range s.payloadRoutes() {
		code, body := c.get(t, b, path)
		var e struct{ Code string }
		_ = json.Unmarshal(body, &e)
		want := "payload_hidden"
		if path == "/api/v1/backup" && strings.HasPrefix(c.name, "read") {
			want = "read_only"
		}
		if code != http.StatusForbidden || e.Code != want || holdsSecret(body) {
			t.Errorf("%s: GET %s: %d %.300s, want 403 %s", c.name, path, code, body, want)
		}
	}
	for _, path := range s.jsonRoutes() {
		code, body := c.get(t, b, path)
		if code != 200 || holdsSecret(body) || !bytes.Contains(body, []byte(`"payload_hidden": true`)) ||
			!bytes.Contains(body, []byte(`"payload_size": `)) || bytes.Contains(body, []byte(`"payload_size": 0`)) {
			t.Errorf("%s: GET %s: %d %.400s, want 200, sizes and payload_hidden, no payload", c.name, path, code, body)
		}
	}
}

// mustShow checks that c sees every payload and result.
func mustShow(t *testing.T, b *bt.Broker, s secretJobs, c caller) {
	t.Helper()
	for _, path := range append(s.payloadRoutes(), s.jsonRoutes()...) {
		code, body := c.get(t, b, path)
		if code != 200 || !holdsSecret(body) && path != "/api/v1/backup" || bytes.Contains(body, []byte("payload_hidden")) {
			t.Errorf("%s: GET %s: %d %.300s, want 200 with the payload", c.name, path, code, body)
		}
	}
	// The result, and the payload, whole.
	if _, body := c.get(t, b, "/api/v1/jobs/"+s.done+"/result"); string(body) != secretResult {
		t.Errorf("%s: result %q", c.name, body)
	}
	if _, body := c.get(t, b, "/api/v1/jobs/"+s.pending+"/payload"); string(body) != secretPayload {
		t.Errorf("%s: payload %q", c.name, body)
	}
}

func TestPayloadsByRole(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", keepResults, func(o *admin.Options) {
		o.Token, o.ReadToken, o.ProducerToken = "admin-tok", "read-tok", "prod-tok"
	})
	s := storeSecrets(t, b, "admin-tok")
	mustShow(t, b, s, caller{name: "admin token", token: "admin-tok"})
	mustShow(t, b, s, caller{name: "admin session", cookie: login(t, b, "admin-tok")})
	mustHide(t, b, s, caller{name: "read token", token: "read-tok"})
	mustHide(t, b, s, caller{name: "read session", cookie: login(t, b, "read-tok")})
	// The producer reads the results of the jobs it sent only: not these.
	if code, body := (caller{token: "prod-tok"}).get(t, b, "/api/v1/jobs/"+s.done+"/result"); code == 200 || holdsSecret(body) {
		t.Errorf("producer: another's result: %d %s", code, body)
	}
}

func TestPayloadsShownToReadTokenWithFlag(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", keepResults, func(o *admin.Options) {
		o.Token, o.ReadToken, o.ShowPayloads = "admin-tok", "read-tok", new(true)
	})
	s := storeSecrets(t, b, "admin-tok")
	read := caller{name: "read token, admin-show-payloads", token: "read-tok"}
	for _, path := range append(s.payloadRoutes()[:6], s.jsonRoutes()...) { // a backup stays the full token's
		if code, body := read.get(t, b, path); code != 200 || !holdsSecret(body) {
			t.Errorf("%s: GET %s: %d %.300s, want the payload", read.name, path, code, body)
		}
	}
	if code, _ := read.get(t, b, "/api/v1/backup"); code != http.StatusForbidden {
		t.Errorf("read token's backup: %d, want 403", code)
	}
	mustShow(t, b, s, caller{name: "admin token", token: "admin-tok"})
}

// With no token set, every caller of the loopback listener is the admin:
// it sees payloads unless admin-show-payloads is false.
func TestPayloadsWithoutToken(t *testing.T) {
	t.Parallel()
	for _, show := range []*bool{nil, new(true), new(false)} {
		b := bt.StartAdmin(t, "", keepResults, func(o *admin.Options) { o.ShowPayloads = show })
		s := storeSecrets(t, b, "")
		c := caller{name: "no token"}
		if show != nil && !*show {
			mustHide(t, b, s, c)
			// What may change things still may: only payloads are hidden.
			if code := bt.API(t, b, "DELETE", "/api/v1/jobs/"+s.pending, "", nil); code != 200 {
				t.Errorf("delete with payloads hidden: %d", code)
			}
			continue
		}
		mustShow(t, b, s, c)
	}
}

// Each payload or result handed out is one event naming who read what
// of which job; a refused read is none.
func TestPayloadReadEvents(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", keepResults, func(o *admin.Options) {
		o.Token, o.ReadToken = "admin-tok", "read-tok"
	})
	s := storeSecrets(t, b, "admin-tok")
	events, err := b.Listen(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	for _, path := range s.payloadRoutes() { // refused: no event
		if code, _ := (caller{token: "read-tok"}).get(t, b, path); code != http.StatusForbidden {
			t.Fatalf("read token: %s: %d", path, code)
		}
	}
	// Reads without payloads: no event either.
	for _, path := range s.jsonRoutes() {
		(caller{token: "admin-tok"}).get(t, b, path)
	}
	session := caller{cookie: login(t, b, "admin-tok")}
	reads := []struct {
		c                 caller
		path              string
		by, msgid, reason string
	}{
		{caller{token: "admin-tok"}, "/api/v1/jobs/" + s.pending + "/payload", "admin", s.pending, "payload"},
		{caller{token: "admin-tok"}, "/api/v1/jobs/" + s.done + "/result", "admin", s.done, "result"},
		{session, "/api/v1/jobs/" + s.pending + "?payload=1", "admin session", s.pending, "payload"},
		{session, "/api/v1/jobs/" + s.done + "?payload=1", "admin session", s.done, "payload and result"},
		{caller{token: "admin-tok"}, "/api/v1/schedules/" + s.schedule + "?payload=1", "admin", "", "payload of schedule " + s.schedule},
		{caller{token: "admin-tok"}, "/api/v1/backup", "admin", "", "every payload and result (a backup)"},
	}
	for _, r := range reads {
		if code, _ := r.c.get(t, b, r.path); code != 200 {
			t.Fatalf("%s: %d", r.path, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	var got []broker.Event
	for len(got) < len(reads) {
		batch, err := events.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		for _, e := range batch {
			if e.Kind == broker.EventPayloadRead {
				got = append(got, e)
			}
		}
	}
	for i, r := range reads {
		e := got[i]
		if e.By != r.by || e.MsgID != r.msgid || e.Reason != r.reason || !strings.HasPrefix(e.From, "127.0.0.1:") ||
			(r.msgid != "" && e.Queue != "q") || e.Time.IsZero() {
			t.Errorf("read %d (%s): event %+v, want by %q msgid %q reason %q", i, r.path, e, r.by, r.msgid, r.reason)
		}
	}

	// And counted by role.
	_, metrics := (caller{token: "admin-tok"}).get(t, b, "/metrics")
	for _, want := range []string{fmt.Sprintf(`emq_payload_reads_total{role="admin"} %d`, len(reads)), `emq_payload_reads_total{role="read"} 0`} {
		if !bytes.Contains(metrics, []byte(want+"\n")) {
			t.Errorf("/metrics: no %s", want)
		}
	}
}
