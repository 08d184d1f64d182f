package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// postAPI posts to b's admin API with the token (if not "") and, if
// program, the admin header; it returns the status and the answer.
func postAPI(t *testing.T, b *bt.Broker, path, token string, program bool) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+b.AdminAddr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if program {
		req.Header.Set(admin.Header, "test")
	}
	resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// errorCode is the code of an error answer ("" when it is none).
func errorCode(body []byte) string {
	var e struct{ Code string }
	_ = json.Unmarshal(body, &e)
	return e.Code
}

// POST /api/v1/jobs/{msgid}/cancel cancels a pending, delayed or
// in-flight job (its worker gets CANCEL, and its late REPLY changes
// nothing); 404 for an unknown job, 409 for one finished; only with the
// full token and the admin header. POST /api/v1/jobs/cancel counts, then
// with confirm=yes cancels, what its filters match.
func TestCancelRoutes(t *testing.T) {
	t.Parallel()
	const token, readToken = "full-token", "read-token"
	b := bt.StartAdmin(t, "", func(o *broker.Options) { bt.Fast(o); o.ResultTTL = time.Hour },
		func(o *admin.Options) { o.Token, o.ReadToken = token, readToken })
	pending, inflight, delayed, dead, worker := jobsInEveryState(t, b)
	cancel := func(id string) string { return "/api/v1/jobs/" + id + "/cancel" }

	for _, c := range []struct {
		name, token string
		program     bool
		want        int
	}{
		{"no token", "", true, http.StatusUnauthorized},
		{"the read-only token", readToken, true, http.StatusForbidden},
		{"no admin header", token, false, http.StatusForbidden},
	} {
		if code, body := postAPI(t, b, cancel(pending), c.token, c.program); code != c.want {
			t.Errorf("cancel with %s: %d %s, want %d", c.name, code, body, c.want)
		}
		if code, body := postAPI(t, b, "/api/v1/jobs/cancel?confirm=yes", c.token, c.program); code != c.want {
			t.Errorf("bulk cancel with %s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if st := jobState(t, b, token, pending); st != "pending" {
		t.Fatalf("after the refused cancels the job is %q", st)
	}

	for _, id := range []string{pending, delayed, inflight} {
		code, body := postAPI(t, b, cancel(id), token, true)
		var ji admin.JobInfo
		if err := json.Unmarshal(body, &ji); code != http.StatusOK || err != nil || ji.MsgID != id || ji.State != "cancelled" {
			t.Fatalf("cancel %s: %d %s, want 200 and the job cancelled", id, code, body)
		}
	}
	if c := bt.Expect[*emqp.Cancel](worker); c.OrigMsgID != inflight {
		t.Fatalf("the worker was told to cancel %s, want %s", c.OrigMsgID, inflight)
	}
	worker.Reply(inflight, []byte("too late"))
	worker.Sync()
	var ji admin.JobInfo
	bt.API(t, b, "GET", "/api/v1/jobs/"+inflight, token, &ji)
	if ji.State != "cancelled" || ji.Trail[len(ji.Trail)-1].Reason != "cancelled by admin" {
		t.Fatalf("after the worker's late REPLY: %+v, want it cancelled by admin", ji)
	}

	// A job done, its result kept (retain-done).
	doneClient := bt.Dial(t, b.Frontend(), "c-done")
	done := doneClient.Request("q", "", []byte("z"))
	worker.Ready(1)
	if req := bt.Expect[*emqp.Request](worker); req.MsgID != done {
		t.Fatalf("the worker got %s, want %s", req.MsgID, done)
	}
	worker.Reply(done, []byte("result"))
	bt.Eventually(t, "the job done", func() bool { return jobState(t, b, token, done) == "done" })

	for _, c := range []struct {
		name, path string
		want       int
		code       string
	}{
		{"cancelled twice", cancel(pending), http.StatusConflict, "wrong_state"},
		{"a done job", cancel(done), http.StatusConflict, "wrong_state"},
		{"a dead job", cancel(dead), http.StatusConflict, "wrong_state"},
		{"an unknown job", cancel(emqp.NewID()), http.StatusNotFound, "not_found"},
		{"bulk, dead jobs", "/api/v1/jobs/cancel?state=dead", http.StatusBadRequest, "bad_filter"},
		{"bulk, a bad filter", "/api/v1/jobs/cancel?older_than=soon", http.StatusBadRequest, "bad_filter"},
	} {
		if code, body := postAPI(t, b, c.path, token, true); code != c.want || errorCode(body) != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, body, c.want, c.code)
		}
	}

	var page admin.JobPage
	bt.API(t, b, "GET", "/api/v1/jobs?state=cancelled", token, &page)
	if len(page.Jobs) != 3 {
		t.Errorf("state=cancelled lists %+v, want the 3 cancelled", page.Jobs)
	}
	bt.API(t, b, "GET", "/api/v1/jobs?queue=q", token, &page)
	if len(page.Jobs) != 1 || page.Jobs[0].MsgID != dead {
		t.Errorf("the queue's jobs after the cancels: %+v, want the dead one alone", page.Jobs)
	}
	if st := jobState(t, b, token, done); st != "done" {
		t.Errorf("the done job after a refused cancel: %s", st)
	}

	// Bulk: counted, then cancelled; the jobs the filter leaves out stay.
	client := bt.Dial(t, b.Frontend(), "c2")
	var batch []string
	for range 3 {
		batch = append(batch, client.Request("q", "batch:7,priority:3", []byte("x")))
	}
	other := client.Request("q", "", []byte("y"))
	var res admin.BulkResult
	if code, body := postAPI(t, b, "/api/v1/jobs/cancel?header=batch:7", token, true); code != 200 ||
		json.Unmarshal(body, &res) != nil || res != (admin.BulkResult{Matched: 3, DryRun: true}) {
		t.Fatalf("bulk cancel without confirm: %d %s, want 3 counted", code, body)
	}
	if st := jobState(t, b, token, batch[0]); st != "pending" {
		t.Fatalf("a dry run cancelled a job: %s", st)
	}
	res = admin.BulkResult{}
	if code, body := postAPI(t, b, "/api/v1/jobs/cancel?queue=q&header=batch:7&confirm=yes", token, true); code != 200 ||
		json.Unmarshal(body, &res) != nil || res != (admin.BulkResult{Matched: 3, Done: 3}) {
		t.Fatalf("bulk cancel: %d %s, want 3 cancelled", code, body)
	}
	for _, id := range batch {
		if st := jobState(t, b, token, id); st != "cancelled" {
			t.Errorf("%s after the bulk cancel: %s", id, st)
		}
	}
	if st := jobState(t, b, token, other); st != "pending" {
		t.Errorf("a job the filter left out is %s", st)
	}
	var stats map[string]any
	bt.API(t, b, "GET", "/api/v1/stats", token, &stats)
	if stats["cancelled"] != 6.0 {
		t.Errorf("stats: cancelled %v, want 6", stats["cancelled"])
	}
}

// jobState is a job's state by the API ("" = no such job).
func jobState(t *testing.T, b *bt.Broker, token, msgid string) string {
	t.Helper()
	var ji admin.JobInfo
	if bt.API(t, b, "GET", "/api/v1/jobs/"+msgid, token, &ji) != http.StatusOK {
		return ""
	}
	return ji.State
}

// The pages of jobs show each job's priority, and the job's page its
// unique key and hold.
func TestJobInfoPriorityAndUnique(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	urgent := client.Request("q", "priority:0,unique:nightly-report,unique-for:3600", nil)
	plain := client.Request("q", "", nil)
	var page admin.JobPage
	bt.API(t, b, "GET", "/api/v1/jobs?queue=q&state=pending", "", &page)
	got := map[string]int{}
	for _, j := range page.Jobs {
		got[j.MsgID] = j.Priority
	}
	if len(got) != 2 || got[urgent] != 0 || got[plain] != emqp.DefaultPriority {
		t.Errorf("priorities listed: %v, want %s 0 and %s %d", got, urgent, plain, emqp.DefaultPriority)
	}
	var ji admin.JobInfo
	bt.API(t, b, "GET", "/api/v1/jobs/"+urgent, "", &ji)
	if ji.Unique != "nightly-report" || ji.UniqueFor != 3600 || ji.Progress != nil {
		t.Errorf("job %+v, want key nightly-report held an hour, no progress", ji)
	}
	// JSON names a script reads.
	raw := map[string]any{}
	bt.API(t, b, "GET", "/api/v1/jobs/"+urgent, "", &raw)
	for _, k := range []string{"priority", "unique", "unique_for_seconds"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("the job's JSON lacks %q: %v", k, raw)
		}
	}
}
