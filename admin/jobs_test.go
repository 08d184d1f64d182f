package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/worker"
)

// post sends body to the admin listener of b as a program does: with
// the headers given, and no other.
func post(t *testing.T, b *bt.Broker, path, contentType string, body []byte, headers map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+b.AdminAddr()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, http.Header, map[string]any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 2 * bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v in %s", req.Method, req.URL, err, raw)
		}
	} else {
		out = map[string]any{"body": string(raw)}
	}
	return resp.StatusCode, resp.Header, out
}

func getResult(t *testing.T, b *bt.Broker, msgid, query, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+b.AdminAddr()+"/api/v1/jobs/"+url.PathEscape(msgid)+"/result"+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	code, _, out := do(t, req)
	return code, out
}

func acked(t *testing.T, b *bt.Broker) int64 { return b.Stats().Acked }

// curl's request, as docs/http.md shows it: a raw body with an
// Idempotency-Key, no admin header, no token on loopback. The job is
// stored with the headers its query gives, under the key's msgid.
func TestHTTPJobRawBody(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	code, h, out := post(t, b, "/api/v1/queues/mail/jobs?priority=5&tenant=acme&delay=1m&unique=k1", "application/octet-stream",
		[]byte("\x00raw\xff"), map[string]string{"Idempotency-Key": "job-1"})
	if code != http.StatusCreated || out["msgid"] != "job-1" || h.Get("Location") != "/api/v1/jobs/job-1" {
		t.Fatalf("raw job: %d %v %v", code, out, h)
	}
	var ji admin.JobInfo
	if bt.API(t, b, "GET", "/api/v1/jobs/job-1?payload=1", "", &ji) != 200 {
		t.Fatal("the job is not stored")
	}
	for _, want := range []string{"priority:5", "tenant:acme", "delay:60", "unique:k1", "keep-result:3600"} {
		if !strings.Contains(ji.Headers, want) {
			t.Errorf("headers %q lack %s", ji.Headers, want)
		}
	}
	if ji.Payload != "AHJhd/8=" || ji.Queue != "mail" {
		t.Errorf("stored %+v", ji)
	}

	// JSON: the payload's JSON as it came, a string's text; the fields
	// and the headers object together.
	code, _, out = post(t, b, "/api/v1/queues/mail/jobs", "application/json",
		[]byte(`{"payload": {"to": "a@b"}, "headers": {"x-trace": "t1", "timeout": 30}, "priority": 7, "keep_result": "10s"}`), nil)
	if code != http.StatusCreated {
		t.Fatalf("JSON job: %d %v", code, out)
	}
	id := out["msgid"].(string)
	if bt.API(t, b, "GET", "/api/v1/jobs/"+url.PathEscape(id)+"?payload=1", "", &ji) != 200 || ji.Payload != "eyJ0byI6ICJhQGIifQ==" ||
		!strings.Contains(ji.Headers, "priority:7") || !strings.Contains(ji.Headers, "x-trace:t1") || !strings.Contains(ji.Headers, "keep-result:10") {
		t.Fatalf("JSON job stored as %+v", ji)
	}
}

// The same Idempotency-Key sent by many at once, as retries do: one
// job stored, and every request answered 201 with its msgid.
func TestHTTPJobIdempotentUnderConcurrentRetries(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			ct, body := "application/octet-stream", []byte("once")
			if i%2 == 1 {
				ct, body = "application/json", []byte(`{"payload": "once"}`)
			}
			code, _, out := post(t, b, "/api/v1/queues/q/jobs", ct, body, map[string]string{"Idempotency-Key": "pay-42"})
			if code != http.StatusCreated || out["msgid"] != "pay-42" {
				t.Errorf("retry %d: %d %v", i, code, out)
			}
		})
	}
	wg.Wait()
	if n := acked(t, b); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
	if qi := bt.QueueInfo(t, b, "q"); qi.Pending != 1 {
		t.Fatalf("queue holds %+v, want one job", qi)
	}
}

// Bad bodies are refused by name, with 4xx, and store nothing.
func TestHTTPJobBadBodiesRefusedByName(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { o.MaxFrameSize = 64 << 10; o.MaxBulk = 3 }, func(o *admin.Options) { o.MaxBodyBytes = 1 << 20 })
	js, raw, nd := "application/json", "application/octet-stream", "application/x-ndjson"
	key := map[string]string{"Idempotency-Key": "k"}
	for _, c := range []struct {
		name, path, ct, body string
		headers              map[string]string
		status               int
		says                 string
	}{
		{"bad JSON", "", js, `{"payload": `, nil, 400, "unexpected EOF"},
		{"unknown field", "", js, `{"payload": "x", "priorty": 5}`, nil, 400, `unknown field "priorty"`},
		{"bad field value", "", js, `{"delay": "soon"}`, nil, 400, `"soon" is not a duration`},
		{"bad header value", "", js, `{"headers": {"priority": "urgent"}}`, nil, 400, "header priority"},
		{"priority out of range", "", js, `{"priority": 70000}`, nil, 400, "header priority"},
		{"a header twice", "", js, `{"headers": {"tenant": "a"}, "tenant": "b"}`, nil, 400, "tenant: header tenant is given in headers too"},
		{"both payloads", "", js, `{"payload": "a", "payload_base64": "YQ=="}`, nil, 400, "payload and payload_base64"},
		{"unknown query parameter", "?prio=1", raw, "x", key, 400, `unknown query parameter "prio"`},
		{"bad query value", "?retry=many", raw, "x", key, 400, "retry"},
		{"query with JSON", "?priority=1", js, `{}`, nil, 400, "no query parameters"},
		{"too big", "", raw, strings.Repeat("x", 65<<10), key, 413, "max-frame-size"},
		{"body over the listener's limit", "", raw, strings.Repeat("x", 1<<20+1), key, 413, "admin max body"},
		{"bad queue name", "/api/v1/queues/" + strings.Repeat("q", 256) + "/jobs", js, `{}`, nil, 400, "queue name"},
		{"bad msgid", "", raw, "x", map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400, "msgid"},
		{"key and msgid differ", "", js, `{"msgid": "a"}`, key, 400, "differ"},
		{"a form's type", "", "text/plain", "x", map[string]string{admin.Header: "1"}, 415, "Content-Type text/plain"},
		{"bulk: bad job", "", js, `[{"payload": "a"}, {"payload": "b", "nope": 1}]`, nil, 400, `job 1 (msgid ""): unknown field "nope"`},
		{"bulk: bad header", "", nd, "{\"payload\": \"a\"}\n{\"retry\": -1}\n", nil, 400, "job 1"},
		{"bulk: same msgid twice", "", js, `[{"msgid": "m"}, {"msgid": "m"}]`, nil, 400, "job 1"},
		{"bulk: over max-bulk", "", js, `[{}, {}, {}, {}]`, nil, 413, "max-bulk"},
		{"bulk: empty", "", js, `[]`, nil, 400, "no job"},
	} {
		path := c.path
		if !strings.HasPrefix(path, "/") {
			path = "/api/v1/queues/q/jobs" + path
		}
		code, _, out := post(t, b, path, c.ct, []byte(c.body), c.headers)
		text, _ := out["error"].(string)
		if code != c.status || !strings.Contains(text, c.says) {
			t.Errorf("%s: %d %v, want %d saying %q", c.name, code, out, c.status, c.says)
		}
	}
	if n := acked(t, b); n != 0 {
		t.Fatalf("%d jobs stored after refusals", n)
	}
}

// A bulk is all or nothing: a refused job (a unique key held) names its
// index and stores none; a good one stores all, under KEY/i.
func TestHTTPJobBulk(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	if code, _, out := post(t, b, "/api/v1/queues/q/jobs", "application/json", []byte(`{"unique": "u"}`), nil); code != 201 {
		t.Fatalf("first job: %d %v", code, out)
	}
	code, _, out := post(t, b, "/api/v1/queues/q/jobs", "application/x-ndjson",
		[]byte("{\"payload\": \"a\"}\n{\"payload\": \"b\", \"unique\": \"u\"}\n"), nil)
	if code != http.StatusConflict || out["code"] != "duplicate" || out["index"] != 1.0 || out["holder"] == "" {
		t.Fatalf("bulk with a held key: %d %v", code, out)
	}
	if n := acked(t, b); n != 1 {
		t.Fatalf("%d jobs stored, want the first alone", n)
	}
	body := []byte(`[{"payload": "a"}, {"payload": "b", "msgid": "own"}, {"payload_base64": "AA=="}]`)
	for range 2 { // sent again: the same jobs
		code, _, out = post(t, b, "/api/v1/queues/q/jobs", "application/json", body, map[string]string{"Idempotency-Key": "bk"})
		ids, _ := out["msgids"].([]any)
		if code != http.StatusCreated || len(ids) != 3 || ids[0] != "bk/0" || ids[1] != "own" || ids[2] != "bk/2" {
			t.Fatalf("bulk: %d %v", code, out)
		}
	}
	if n := acked(t, b); n != 4 {
		t.Fatalf("%d jobs stored, want 4", n)
	}
}

// The producer token sends jobs and reads results, nothing else; the
// read-only token sends no job; the admin token does everything.
func TestHTTPJobRoles(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, func(o *admin.Options) {
		o.Token, o.ReadToken, o.ProducerToken = "admin-tok", "read-tok", "prod-tok"
	})
	send := func(token string) (int, map[string]any) {
		code, _, out := post(t, b, "/api/v1/queues/q/jobs", "application/octet-stream", []byte("x"),
			map[string]string{"Authorization": "Bearer " + token})
		return code, out
	}
	code, out := send("prod-tok")
	if code != 201 {
		t.Fatalf("producer's job: %d %v", code, out)
	}
	id := out["msgid"].(string)
	if code, out := getResult(t, b, id, "", "prod-tok"); code != http.StatusAccepted || out["state"] != "pending" {
		t.Fatalf("producer's result request: %d %v", code, out)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/stats"},
		{"GET", "/api/v1/jobs/" + id},
		{"GET", "/api/v1/jobs/" + id + "/payload"},
		{"DELETE", "/api/v1/jobs/" + id},
		{"POST", "/api/v1/queues/q/purge?confirm=q"},
	} {
		req, _ := http.NewRequest(c.method, "http://"+b.AdminAddr()+c.path, nil)
		req.Header.Set("Authorization", "Bearer prod-tok")
		req.Header.Set(admin.Header, "1")
		if code, _, out := do(t, req); code != http.StatusForbidden || out["code"] != "producer_only" {
			t.Errorf("producer %s %s: %d %v, want 403 producer_only", c.method, c.path, code, out)
		}
	}
	if code, out := send("read-tok"); code != http.StatusForbidden || out["code"] != "read_only" {
		t.Errorf("read-only token's job: %d %v, want 403", code, out)
	}
	if code, out := send("wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token's job: %d %v, want 401", code, out)
	}
	code, out = send("admin-tok")
	if code != 201 {
		t.Fatalf("admin token's job: %d %v", code, out)
	}
	// The producer reads its own jobs' results, not others' (answered as
	// a job it never sent).
	if code, out := getResult(t, b, out["msgid"].(string), "", "prod-tok"); code != http.StatusNotFound {
		t.Errorf("producer's request for the admin's job's result: %d %v, want 404", code, out)
	}
	// Results are payloads: the read-only token sees none (payloads_test.go).
	if code, out := getResult(t, b, id, "", "read-tok"); code != http.StatusForbidden || out["code"] != "payload_hidden" {
		t.Errorf("read-only token's result request: %d %v, want 403 payload_hidden", code, out)
	}
	if code, _ := getResult(t, b, id, "", "admin-tok"); code != http.StatusAccepted {
		t.Errorf("admin token's result request: %d", code)
	}
	if n := acked(t, b); n != 2 {
		t.Fatalf("%d jobs stored, want the producer's and the admin's", n)
	}
}

// curl's plain request passes the cross-site guard; a form posted from
// another site does not, nor a raw body without what only a program
// sends.
func TestHTTPJobGuard(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	raw := "application/octet-stream"
	for _, c := range []struct {
		name    string
		ct      string
		headers map[string]string
		want    int
	}{
		{"curl with an Idempotency-Key", raw, map[string]string{"Idempotency-Key": "curl-1"}, 201},
		{"a form posted from another site", "application/x-www-form-urlencoded", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"a text/plain form with a key", "text/plain", map[string]string{"Idempotency-Key": "k2"}, 403},
		{"a raw body without a key or token", raw, nil, 403},
		{"another site's fetch with a key", raw, map[string]string{"Idempotency-Key": "k3", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, 403},
	} {
		code, _, out := post(t, b, "/api/v1/queues/q/jobs", c.ct, []byte("x"), c.headers)
		if code != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, code, out, c.want)
		}
	}
	if n := acked(t, b); n != 1 {
		t.Fatalf("%d jobs stored, want curl's alone", n)
	}
}

// A result request waits for the worker's REPLY and answers with it; a
// job the broker never had is 404; one not done when the wait is over
// is 202 with its state; a dead one is 409.
func TestHTTPJobResultLongPoll(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	if code, out := getResult(t, b, "never", "?wait=1", ""); code != 404 || out["code"] != "not_found" {
		t.Fatalf("unknown job: %d %v", code, out)
	}
	code, _, out := post(t, b, "/api/v1/queues/work/jobs", "application/json", []byte(`{"payload": "ping"}`), nil)
	if code != 201 {
		t.Fatalf("job: %d %v", code, out)
	}
	id := out["msgid"].(string)
	if code, out := getResult(t, b, id, "", ""); code != http.StatusAccepted || out["state"] != "pending" {
		t.Fatalf("result before any worker: %d %v", code, out)
	}
	type answer struct {
		code int
		out  map[string]any
	}
	got := make(chan answer, 1)
	go func() { c, o := getResult(t, b, id, "?wait=30s", ""); got <- answer{c, o} }()
	bt.Eventually(t, "the result request waits", func() bool { return b.Admin.ResultWaits() == 1 })

	w, err := worker.New(worker.Options{Broker: b.Backend(), Logger: bt.Logger(t),
		HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("work", func(_ context.Context, j *worker.Job) ([]byte, error) {
		if string(j.Payload) == "die" {
			return nil, errors.New("no good")
		}
		return append([]byte("pong to "), j.Payload...), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	select {
	case a := <-got:
		if a.code != 200 || a.out["body"] != "pong to ping" {
			t.Fatalf("waited result: %d %v", a.code, a.out)
		}
	case <-time.After(bt.Wait):
		t.Fatal("the result request did not return the REPLY")
	}
	if code, out := getResult(t, b, id, "?wait=5s", ""); code != 200 || out["body"] != "pong to ping" {
		t.Fatalf("result again: %d %v", code, out)
	}

	code, _, out = post(t, b, "/api/v1/queues/work/jobs", "application/json", []byte(`{"payload": "die", "retry": 0}`), nil)
	if code != 201 {
		t.Fatalf("job: %d %v", code, out)
	}
	if code, out := getResult(t, b, out["msgid"].(string), "?wait=30s", ""); code != http.StatusConflict || out["code"] != "dead" {
		t.Fatalf("dead job's result: %d %v", code, out)
	}
}
