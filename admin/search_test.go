package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// The admin API filters listings on the server and acts on every dead job
// a filter matches: counted without confirm=yes, done with it; bad
// filters are refused naming the parameter.
func TestSearchAndBulkAPI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	for i := range 6 {
		id := client.Request("q", "retry-count:0", nil)
		worker.Ready(1)
		bt.Expect[*emqp.Request](worker)
		reason := []string{"disk full", "bad input"}[i%2]
		worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: id, Reason: reason})
	}
	bt.Eventually(t, "all dead", func() bool { return b.Stats().DeadLettered == 6 })

	var page admin.JobPage
	if code := bt.API(t, b, "GET", "/api/v1/jobs?state=dead&error=disk", "", &page); code != 200 || len(page.Jobs) != 3 {
		t.Fatalf("error=disk: %d, %d jobs", code, len(page.Jobs))
	}
	for query, param := range map[string]string{"older_than=soon": "older_than", "newer_than=-1h": "newer_than",
		"state=lost": "state", "limit=0": "limit"} {
		if code := bt.API(t, b, "GET", "/api/v1/jobs?"+query, "", nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400 naming %s", query, code, param)
		}
	}
	var res admin.BulkResult
	if code := bt.API(t, b, "POST", "/api/v1/dead/retry?error=disk", "", &res); code != 200 || res.Matched != 3 || res.Done != 0 || !res.DryRun {
		t.Fatalf("dry run: %d %+v", code, res)
	}
	if code := bt.API(t, b, "POST", "/api/v1/dead/retry?error=disk&confirm=yes", "", &res); code != 200 || res.Matched != 3 || res.Done != 3 {
		t.Fatalf("retry: %d %+v", code, res)
	}
	if code := bt.API(t, b, "POST", "/api/v1/dead/remove?queue=q&confirm=yes", "", &res); code != 200 || res.Matched != 3 || res.Done != 3 {
		t.Fatalf("remove: %d %+v", code, res)
	}
	qs, _ := b.Queues(context.Background())
	if len(qs) != 1 || qs[0].Pending+qs[0].InFlight+qs[0].Delayed != 3 {
		t.Fatalf("after: %+v", qs)
	}
	_, err := admin.ParseJobFilter(map[string][]string{"older_than": {"soon"}})
	if err == nil || !strings.Contains(err.Error(), "older_than") {
		t.Fatalf("ParseJobFilter: %v", err)
	}
}

// With retain-done (ResultTTL) a replied job stays listable as done, with
// its queue's count, until its time is up.
func TestDoneJobsAreListed(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) {
		bt.Fast(o)
		o.ResultTTL = time.Hour
	}, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	id := client.Request("q", "", nil)
	bt.Expect[*emqp.Request](worker)
	worker.Reply(id, []byte("answer"))
	var page admin.JobPage
	bt.Eventually(t, "listed as done", func() bool {
		return bt.API(t, b, "GET", "/api/v1/jobs?state=done", "", &page) == 200 && len(page.Jobs) == 1
	})
	if j := page.Jobs[0]; j.MsgID != id || j.State != "done" {
		t.Fatalf("done job: %+v", j)
	}
	var qs []broker.QueueInfo
	if bt.API(t, b, "GET", "/api/v1/queues", "", &qs); len(qs) != 1 || qs[0].Done != 1 || qs[0].Pending != 0 {
		t.Fatalf("queues: %+v", qs)
	}
	var ji admin.JobInfo
	if bt.API(t, b, "GET", "/api/v1/jobs/"+id+"?payload=1", "", &ji); ji.State != "done" || ji.Finished.IsZero() || ji.Result == nil || *ji.Result != "YW5zd2Vy" {
		t.Fatalf("the done job with its result: %+v", ji)
	}
	if got := bt.TrailKinds(ji.Trail); got != "received dispatched#1 replied" {
		t.Fatalf("a done job's trail: %s", got)
	}
	// A delivery under way shows before anything is written.
	worker.Ready(1)
	held := client.Request("q", "", nil)
	bt.Expect[*emqp.Request](worker)
	if bt.API(t, b, "GET", "/api/v1/jobs/"+held, "", &ji); ji.State != "inflight" || bt.TrailKinds(ji.Trail) != "received dispatched#1" {
		t.Fatalf("a job in flight: %s %s", ji.State, bt.TrailKinds(ji.Trail))
	}
}
