package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// jobsInEveryState makes a pending, an in-flight, a delayed and a dead job.
func jobsInEveryState(t *testing.T, b *bt.Broker) (pending, inflight, delayed, dead string, worker *bt.Peer) {
	t.Helper()
	client := bt.Dial(t, b.Frontend(), "c")
	worker = bt.Dial(t, b.Backend(), "w")
	worker.Inform("q")
	worker.KeepAlive(50 * time.Millisecond)
	dead = client.Request("q", "retry-count:0", []byte("doomed"))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: dead, Reason: "broken"})
	bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == 1 })
	inflight = client.Request("q", "", []byte("running"))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	pending = client.Request("q", "", []byte("waiting\x00\xff"))
	delayed = client.Request("q", "delay:3600", nil)
	return
}

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	pending, inflight, delayed, dead, worker := jobsInEveryState(t, b)

	var queues []broker.QueueInfo
	if bt.API(t, b, "GET", "/api/v1/queues", "", &queues) != 200 || len(queues) != 1 {
		t.Fatalf("queues: %+v", queues)
	}
	if q := queues[0]; q.Name != "q" || q.Pending != 1 || q.InFlight != 1 || q.Delayed != 1 || q.Workers != 1 || q.OldestAge <= 0 {
		t.Fatalf("queue: %+v", q)
	}
	var workers []broker.WorkerInfo
	bt.API(t, b, "GET", "/api/v1/workers", "", &workers)
	if len(workers) != 1 || workers[0].ID != "w" || workers[0].InFlight != 1 || workers[0].Queues[0] != "q" {
		t.Fatalf("workers: %+v", workers)
	}

	states := map[string]string{}
	var page admin.JobPage
	bt.API(t, b, "GET", "/api/v1/jobs?queue=q", "", &page)
	for _, j := range page.Jobs {
		states[j.MsgID] = j.State
	}
	want := map[string]string{pending: "pending", inflight: "inflight", delayed: "pending", dead: "dead"}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	bt.API(t, b, "GET", "/api/v1/jobs?state=inflight", "", &page)
	if len(page.Jobs) != 1 || page.Jobs[0].MsgID != inflight || page.Jobs[0].Worker != "w" {
		t.Fatalf("inflight: %+v", page.Jobs)
	}
	// Paging: one job a page, all four reached.
	seen, after := 0, ""
	for i := 0; i < 10; i++ {
		page = admin.JobPage{}
		bt.API(t, b, "GET", "/api/v1/jobs?limit=1&after="+url.QueryEscape(after), "", &page)
		seen += len(page.Jobs)
		if after = page.Next; after == "" {
			break
		}
	}
	if seen != 4 {
		t.Fatalf("paged through %d jobs, want 4", seen)
	}

	var ji admin.JobInfo
	if bt.API(t, b, "GET", "/api/v1/jobs/"+pending+"?payload=1", "", &ji) != 200 {
		t.Fatal("job not found")
	}
	if ji.PayloadSize != 9 || ji.Preview != "waiting.\ufffd" || ji.Payload != "d2FpdGluZwD/" {
		t.Fatalf("job %+v", ji)
	}
	for _, method := range []string{"GET", "DELETE"} {
		if code := bt.API(t, b, method, "/api/v1/jobs/nope", "", nil); code != 404 {
			t.Fatalf("%s of an unknown msgid: %d, want 404", method, code)
		}
	}

	// Retry the dead job: it is dispatched again.
	if code := bt.API(t, b, "POST", "/api/v1/jobs/"+dead+"/retry", "", nil); code != 200 {
		t.Fatalf("retry: %d", code)
	}
	if code := bt.API(t, b, "POST", "/api/v1/jobs/"+pending+"/retry", "", nil); code != 409 {
		t.Fatalf("retry of a pending job: %d, want 409", code)
	}
	// Delete the pending job; purge needs its confirmation.
	if code := bt.API(t, b, "DELETE", "/api/v1/jobs/"+pending, "", nil); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if code := bt.API(t, b, "POST", "/api/v1/queues/q/purge", "", nil); code != 400 {
		t.Fatalf("purge without confirm: %d, want 400", code)
	}
	var purged map[string]int
	if bt.API(t, b, "POST", "/api/v1/queues/q/purge?confirm=q", "", &purged) != 200 || purged["removed"] != 3 {
		t.Fatalf("purge: %v (want the in-flight, the delayed and the retried job)", purged)
	}
	bt.API(t, b, "GET", "/api/v1/queues", "", &queues)
	if len(queues) != 1 || queues[0].Pending+queues[0].InFlight+queues[0].Delayed != 0 {
		t.Fatalf("after purge: %+v", queues)
	}
	// The purged in-flight job's late REPLY is ignored.
	worker.Reply(inflight, nil)
	worker.Sync()
	if n := b.Stats().Replied; n != 0 {
		t.Fatalf("replied = %d after a purge", n)
	}
}

func TestAdminToken(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, bt.Token("s3cret"))
	for _, path := range []string{"/api/v1/queues", "/metrics", "/readyz"} {
		if code := bt.API(t, b, "GET", path, "", nil); code != 401 {
			t.Errorf("%s without token: %d, want 401", path, code)
		}
		if code := bt.API(t, b, "GET", path, "wrong", nil); code != 401 {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
		if code := bt.API(t, b, "GET", path, "s3cret", nil); code != 200 {
			t.Errorf("%s with the token: %d", path, code)
		}
	}
	client := bt.Dial(t, b.Frontend(), "c")
	id := client.Request("q", "", nil)
	if code := bt.API(t, b, "DELETE", "/api/v1/jobs/"+id, "wrong", nil); code != 401 {
		t.Fatalf("delete with a wrong token: %d", code)
	}
	var ji admin.JobInfo
	if bt.API(t, b, "GET", "/api/v1/jobs/"+id, "s3cret", &ji) != 200 || ji.MsgID != id {
		t.Fatal("the job was changed by a refused request")
	}

	opts := admin.DefaultOptions()
	opts.Addr = "0.0.0.0:0"
	if err := opts.Validate(); err == nil || !strings.Contains(err.Error(), "admin-token") {
		t.Fatalf("non-loopback admin without a token: %v", err)
	}
}

// /metrics parses as Prometheus text, and its counters move with jobs.
func TestMetrics(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	scrape := func() map[string]*dto.MetricFamily { return bt.ScrapeMetrics(t, b) }
	value := func(mf map[string]*dto.MetricFamily, name, label string) float64 {
		t.Helper()
		return bt.MetricValue(t, mf, name, label)
	}
	before := scrape()
	if value(before, "emq_jobs_acked_total", "") != 0 {
		t.Fatal("acked before any job")
	}
	jobsInEveryState(t, b)
	bad := bt.Dial(t, b.Frontend(), "bad")
	bad.SendFrames([]byte("x"))
	bt.Expect[*emqp.Error](bad)
	sched := bt.Dial(t, b.Frontend(), "sched")
	sched.InformScheduler()
	sched.KeepAlive(50 * time.Millisecond)

	after := scrape()
	for name, want := range map[string]float64{
		"emq_jobs_acked_total":         4,
		"emq_jobs_dispatched_total":    2,
		"emq_jobs_failed_total":        1,
		"emq_jobs_dead_lettered_total": 1,
		"emq_workers":                  1,
		"emq_schedulers":               1,
	} {
		if got := value(after, name, ""); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(after, "emq_queue_pending_jobs", "q"); got != 1 {
		t.Errorf("pending{q} = %v", got)
	}
	if got := value(after, "emq_queue_inflight_jobs", "q"); got != 1 {
		t.Errorf("inflight{q} = %v", got)
	}
	if got := value(after, "emq_protocol_errors_total", "bad_request"); got != 1 {
		t.Errorf("protocol errors{bad_request} = %v", got)
	}
	if value(after, "emq_journal_commit_duration_seconds", "") == 0 || value(after, "emq_journal_commit_writes", "") == 0 {
		t.Error("journal commits are not observed")
	}
	value(after, "emq_replay_duration_seconds", "")

	// The stats API shows the same counters, by name, in the order of
	// broker.Stats.Counters, with the same values, then pub/sub's (on here).
	resp, err := http.Get("http://" + b.AdminAddr() + "/api/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var si admin.StatsInfo
	if err := json.Unmarshal(raw, &si); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
	counters := broker.Stats{}.Counters()
	if len(si.Counters) != len(counters)+len(admin.PubSubCounters) || len(si.Errors) != len(broker.ErrorCodes()) {
		t.Fatalf("stats API: %d counters and %d error codes, want %d and %d:\n%s",
			len(si.Counters), len(si.Errors), len(counters)+len(admin.PubSubCounters), len(broker.ErrorCodes()), raw)
	}
	for i, c := range counters {
		m := admin.CounterMetric(c.Name)
		if got := si.Counters[i]; got.Name != c.Name || float64(got.Value) != value(after, m, "") {
			t.Errorf("stats API counter %d: %+v; /metrics has %s = %v", i, got, m, value(after, m, ""))
		}
	}
	for i, code := range broker.ErrorCodes() {
		if got := si.Errors[i]; got.Name != code || float64(got.Value) != value(after, "emq_protocol_errors_total", code) {
			t.Errorf("stats API error count %d: %+v, want %s as in /metrics", i, got, code)
		}
	}
}

// The admin API's status says whose fault a refusal is: 4xx the caller's
// (no such job, wrong state, bad filter), 5xx the broker's (the journal
// failed, or cannot do it). An I/O error is never a 400 or a 409.
func TestAdminErrorStatus(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	_, _, _, dead, _ := jobsInEveryState(t, b)
	expectStatus(t, b, []wantStatus{
		{"GET", "/api/v1/jobs/nope", 404},
		{"POST", "/api/v1/jobs/nope/retry", 404},
		{"POST", "/api/v1/jobs/" + dead + "/retry", 200},
		{"POST", "/api/v1/jobs/" + dead + "/retry", 409}, // pending now
		{"GET", "/api/v1/jobs?after=nonsense", 400},
		{"GET", "/api/v1/jobs?state=dead&after=pending:00", 400},
		{"GET", "/api/v1/jobs?state=sleeping", 400},
		{"GET", "/api/v1/jobs?limit=0", 400},
		{"GET", "/api/v1/jobs/", 400}, // no msgid (the text: TestJobsShowSaysWhy in cmd/emq)
		{"DELETE", "/api/v1/jobs/", 400},
	})
	dir := t.TempDir()
	broken := bt.StartAdmin(t, dir, func(o *broker.Options) {
		bt.Fast(o)
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return bt.BrokenReads{Journal: j} })
	}, nil)
	expectStatus(t, broken, []wantStatus{
		{"GET", "/api/v1/jobs/x", 500},
		{"GET", "/api/v1/jobs", 500},
		{"GET", "/api/v1/queues", 500},
		{"POST", "/api/v1/compact", 501},
	})
}

type wantStatus struct {
	method, path string
	want         int
}

func expectStatus(t *testing.T, b *bt.Broker, cases []wantStatus) {
	t.Helper()
	for _, c := range cases {
		if code := bt.API(t, b, c.method, c.path, "", nil); code != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, code, c.want)
		}
	}
}

// A backup that fails before its first byte (here: the broker stopped)
// is answered with the error, not a dropped connection.
func TestBackupFailureBeforeAnyByteIsAnswered(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + b.AdminAddr() + "/api/v1/backup")
	if err != nil {
		t.Fatalf("the backup's answer: %v", err)
	}
	defer resp.Body.Close()
	var e struct{ Error, Code string }
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusServiceUnavailable ||
		e.Code != "unavailable" || !strings.Contains(e.Error, "backup") || resp.Header.Get("Content-Disposition") != "" {
		t.Fatalf("a backup of a stopped broker: %d %+v (%v)", resp.StatusCode, e, err)
	}
}
