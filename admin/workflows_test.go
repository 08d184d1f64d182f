package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// A job's page names its parents with their states and the jobs waiting
// for it; batches are listed, shown with their counts, opened and
// closed (which releases what waits for the batch), over HTTP and
// through admin.Client; a waiting job is cancelled like a pending one.
func TestWorkflowRoutes(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", func(o *broker.Options) { bt.Fast(o); o.ResultTTL = time.Hour }, nil)
	c := bt.Dial(t, b.Frontend(), "c")
	api, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if bi, err := api.OpenBatch(ctx, "b", true); err != nil || bi.State != "open" || !bi.Open {
		t.Fatalf("open: %+v, %v", bi, err)
	}
	p := c.Request("q", "batch:b", nil)
	child := c.Request("q", "after:"+p, nil)
	cb := c.Request("q", "after-batch:b,after-failed:run", nil)
	var ji admin.JobInfo
	bt.API(t, b, "GET", "/api/v1/jobs/"+child, "", &ji)
	if ji.State != "waiting" || len(ji.After) != 1 || ji.After[0] != (admin.Parent{MsgID: p, State: "pending"}) || ji.AfterFailed != "cancel" || ji.Waits != 1 {
		t.Fatalf("the child: %+v", ji)
	}
	bt.API(t, b, "GET", "/api/v1/jobs/"+p, "", &ji)
	if ji.Batch != "b" || len(ji.Children) != 1 || ji.Children[0] != child {
		t.Fatalf("the parent: %+v", ji)
	}
	var page admin.JobPage
	bt.API(t, b, "GET", "/api/v1/jobs?state=waiting", "", &page)
	if len(page.Jobs) != 2 {
		t.Fatalf("waiting jobs: %+v", page.Jobs)
	}

	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	w.Reply(p, nil)
	w.Ready(1)
	if req := bt.Expect[*emqp.Request](w); req.MsgID != child {
		t.Fatalf("after the parent: %s; want the child", req.MsgID)
	}
	w.Reply(child, nil)
	bi, err := api.Batch(ctx, "b")
	if err != nil || bi.State != "open" || bi.Done != 1 || bi.Waiters != 1 {
		t.Fatalf("the open batch with its job done: %+v, %v", bi, err)
	}
	if code, body := postAPI(t, b, "/api/v1/batches/b/close", "", true); code != http.StatusOK {
		t.Fatalf("close: %d %s", code, body)
	}
	w.Ready(1)
	if req := bt.Expect[*emqp.Request](w); req.MsgID != cb {
		t.Fatalf("after the close: %s; want the batch's callback", req.MsgID)
	}
	var list admin.BatchPage
	bt.API(t, b, "GET", "/api/v1/batches", "", &list)
	if len(list.Batches) != 1 || list.Batches[0].State != "complete" {
		t.Fatalf("batches: %+v", list)
	}
	if code := bt.API(t, b, "GET", "/api/v1/batches/none", "", nil); code != http.StatusNotFound {
		t.Fatalf("an unknown batch: %d", code)
	}

	// Cancelled while it waits.
	q := c.Request("q", "", nil)
	waiting := c.Request("q", "after:"+q, nil)
	code, body := postAPI(t, b, "/api/v1/jobs/"+waiting+"/cancel", "", true)
	if err := json.Unmarshal(body, &ji); code != http.StatusOK || err != nil || ji.State != "cancelled" {
		t.Fatalf("cancel of a waiting job: %d %s", code, body)
	}
}
