package ui_test

import (
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// The workflow views in a real browser: a job's page draws what it waits
// for (with their states) and what waits for it; the batches page lists
// a batch with its progress; the batch's page shows its counts and jobs,
// and its button closes it, which releases the job waiting for it.
func TestWorkflowPages(t *testing.T) {
	b := bt.StartAdmin(t, "", func(o *broker.Options) { bt.Fast(o); o.ResultTTL = time.Hour }, nil)
	c := bt.Dial(t, b.Frontend(), "c")
	if code := adminAPI(t, b, "POST", "/api/v1/batches/nightly/open", "", nil); code != 200 {
		t.Fatalf("open the batch: %d", code)
	}
	extract := c.Request("etl", "batch:nightly", []byte(`{"step":"extract"}`))
	load := c.Request("etl", "batch:nightly", []byte(`{"step":"load"}`))
	report := c.Request("etl", "after:"+extract+";"+load, []byte(`{"step":"report"}`))
	mail := c.Request("mail", "after-batch:nightly", []byte(`{"to":"ops@example.com"}`))
	w := bt.Worker(t, b.Backend(), "w", "etl")
	w.Ready(1)
	if req := bt.Expect[*emqp.Request](w); req.MsgID != extract {
		t.Fatalf("ran %s first", req.MsgID)
	}
	w.Reply(extract, []byte("12 rows"))

	tb := newTab(t, base(b))
	tb.open("job/" + report)
	tb.until("the report's workflow", sel(`document.querySelector('#parents a[href="#/job/%s"]') && document.querySelector('#parents a[href="#/job/%s"]')`, extract, load))
	if got := tb.texts(`#parents li`); len(got) != 2 || got[0] != extract+" done" || got[1] != load+" pending" {
		t.Errorf("what the report waits for: %q; want the extract done, the load pending", got)
	}
	if got := tb.texts(`#workflow .flow-self div`); len(got) == 0 || got[0] != "waits for 1 more" {
		t.Errorf("the report's own box: %q", got)
	}
	tb.shot("workflow")
	tb.open("job/" + load)
	tb.until("the load's children", sel(`document.querySelector('#children a[href="#/job/%s"]')`, report))
	if got := tb.texts(`#batch-link`); len(got) != 1 || got[0] != "nightly" {
		t.Errorf("the load's batch: %q", got)
	}

	tb.open("batches")
	tb.until("the batch's row", `document.querySelector('tr[data-batch="nightly"]')`)
	cells := tb.texts(`tr[data-batch="nightly"] td`)
	if cells[1] != "open" || cells[2] != "1 of 2" {
		t.Errorf("the batch on the batches page: %q; want open, 1 of 2", cells)
	}
	tb.click(`tr[data-batch="nightly"] a`)
	tb.until("the batch's page", `document.querySelector('#numbers [data-stat="Waiters"]') && document.querySelector('button[data-action="close"]')`)
	if got := tb.texts(`#numbers [data-stat="Done"] .v`); got[0] != "1" {
		t.Errorf("done on the batch page: %q", got)
	}
	tb.until("the batch's jobs", sel(`document.querySelector('tr[data-msgid="%s"]')`, load))
	tb.shot("batch")

	// The load done, the batch is still open: the mail waits. Closed, it
	// is complete, and the mail runs.
	w.Ready(1)
	if req := bt.Expect[*emqp.Request](w); req.MsgID != load {
		t.Fatalf("ran %s; want the load", req.MsgID)
	}
	w.Reply(load, nil)
	tb.click(`button[data-action="close"]`)
	tb.until("the batch complete", `document.querySelector('#numbers [data-stat="State"] .v').textContent === 'complete'`)
	var ji admin.JobInfo
	bt.Eventually(t, "the mail released", func() bool {
		adminAPI(t, b, "GET", "/api/v1/jobs/"+mail, "", &ji)
		return ji.State == "pending"
	})
	tb.noErrors()
}
