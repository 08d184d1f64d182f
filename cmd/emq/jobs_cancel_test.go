package main

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// keepDone is fastBroker with done (and cancelled) jobs kept an hour.
func keepDone(o *broker.Options) { fastBroker(o); o.ResultTTL = time.Hour }

// has fails the test unless out matches the regular expression re.
func has(t *testing.T, what, out, re string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(out) {
		t.Fatalf("%s: want %q in\n%s", what, re, out)
	}
}

// emq jobs cancel: one job by msgid, printed cancelled; a job finished or
// unknown refused with the reason and a non-zero exit; in bulk through
// the filter flags, counted first and cancelled with --yes. jobs ls and
// show give each job's priority, show its unique key and progress.
func TestJobsCancelCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", keepDone, bt.Token("tok"))
	on := []string{"--admin", b.AdminAddr(), "--admin-token", "tok"}
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	dead := client.Request("q", "retry-count:0", []byte("doomed"))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: dead, Reason: "broken"})
	bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == 1 })
	inflight := client.Request("q", "", []byte("running"))
	worker.Ready(1)
	bt.Expect[*emqp.Request](worker)
	worker.Send(&emqp.Progress{MsgID: emqp.NewID(), OrigMsgID: inflight, Text: "40 resizing"})
	bt.Eventually(t, "progress taken", func() bool { return b.Stats().Progress == 1 })
	pending := client.Request("q", "priority:3,unique:invoice-42,unique-for:60", []byte("waiting"))

	out := mustEmq(t, append([]string{"jobs", "ls", "--state", "pending"}, on...)...)
	has(t, "jobs ls", out, `MSGID\s+QUEUE\s+STATE\s+PRIORITY\s+ATTEMPTS`)
	has(t, "jobs ls", out, pending+`\s+q\s+pending\s+3\s+0\s`)
	has(t, "jobs ls", out, inflight+`\s+q\s+inflight\s+1024\s`)
	out = mustEmq(t, append([]string{"jobs", "show", pending}, on...)...)
	has(t, "jobs show", out, `(?m)^priority\s+3$`)
	has(t, "jobs show", out, `(?m)^unique key\s+invoice-42 \(held 1m0s after it is done\)$`)
	out = mustEmq(t, append([]string{"jobs", "show", inflight}, on...)...)
	has(t, "jobs show of a job in flight", out, `(?m)^progress\s+40% resizing \(\d+s ago\)$`)

	out = mustEmq(t, append([]string{"jobs", "cancel", pending}, on...)...)
	has(t, "jobs cancel", out, `(?m)^msgid\s+`+pending+`$`)
	has(t, "jobs cancel", out, `(?m)^state\s+cancelled$`)
	has(t, "jobs cancel", out, `cancelled reason="cancelled by admin"`)
	for _, c := range []struct{ id, why string }{
		{pending, "job " + pending + " is cancelled"},
		{dead, "job " + dead + " is dead"},
		{"no-such-job", "no such job: no-such-job"},
	} {
		_, stderr, err := emq(t, "", append([]string{"jobs", "cancel", c.id}, on...)...)
		if err == nil || !strings.Contains(stderr, c.why) {
			t.Errorf("jobs cancel %s: %v %q, want a failure saying %q", c.id, err, stderr, c.why)
		}
	}
	has(t, "jobs ls --state cancelled", mustEmq(t, append([]string{"jobs", "ls", "--state", "cancelled"}, on...)...), pending+`\s+q\s+cancelled\s+3\s`)

	var batch []string
	for range 3 {
		batch = append(batch, client.Request("q", "batch:1", nil))
	}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "cancel"}, on...)...); err == nil || !strings.Contains(stderr, "name one MSGID, or --all, or filters") {
		t.Fatalf("jobs cancel with nothing to cancel: %v %s", err, stderr)
	}
	if out := mustEmq(t, append([]string{"jobs", "cancel", "--header", "batch"}, on...)...); out != "3 jobs match; add --yes to cancel them\n" {
		t.Fatalf("bulk cancel without --yes: %q", out)
	}
	if out := mustEmq(t, append([]string{"jobs", "cancel", "--header", "batch", "--yes"}, on...)...); out != "cancelled 3 of 3 matching jobs\n" {
		t.Fatalf("bulk cancel: %q", out)
	}
	for _, id := range batch {
		has(t, "a job cancelled in bulk", mustEmq(t, append([]string{"jobs", "show", id}, on...)...), `(?m)^state\s+cancelled$`)
	}
	if out := mustEmq(t, append([]string{"jobs", "cancel", "--inflight", "--yes"}, on...)...); out != "cancelled 1 of 1 matching jobs\n" {
		t.Fatalf("bulk cancel of the jobs in flight: %q", out)
	}
	if c := bt.Expect[*emqp.Cancel](worker); c.OrigMsgID != inflight {
		t.Fatalf("the worker was told to cancel %s, want %s", c.OrigMsgID, inflight)
	}
}

// Offline, emq jobs cancel works on the journal: the cancelled jobs are
// deleted (no broker says how long to keep them), and cancelling only
// those in flight needs a running broker.
func TestJobsCancelCLIOffline(t *testing.T) {
	t.Parallel()
	b, dead, inflight, pending := brokerWithJobs(t, "")
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	off := []string{"--data-dir", b.Dir}
	if _, stderr, err := emq(t, "", append([]string{"jobs", "cancel", "--inflight"}, off...)...); err == nil || !strings.Contains(stderr, "running broker") {
		t.Fatalf("offline cancel of the jobs in flight: %v %s", err, stderr)
	}
	has(t, "offline jobs cancel", mustEmq(t, append([]string{"jobs", "cancel", pending}, off...)...), `(?m)^state\s+cancelled$`)
	if out := mustEmq(t, append([]string{"jobs", "cancel", "--all"}, off...)...); out != "1 jobs match; add --yes to cancel them\n" {
		t.Fatalf("offline bulk cancel without --yes: %q", out) // the one in flight is pending to the journal
	}
	if out := mustEmq(t, append([]string{"jobs", "cancel", "--all", "--yes"}, off...)...); out != "cancelled 1 of 1 matching jobs\n" {
		t.Fatalf("offline bulk cancel: %q", out)
	}
	out := mustEmq(t, append([]string{"jobs", "ls"}, off...)...)
	if !strings.Contains(out, dead) || strings.Contains(out, inflight) || strings.Contains(out, pending) {
		t.Fatalf("offline after the cancels, want the dead job alone:\n%s", out)
	}
}

// emq send --priority and --unique put the headers on the job; a second
// job with the key is refused: exit status 3 and the holder named.
func TestSendPriorityUnique(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fastBroker, nil)
	send := func(args ...string) (string, string, error) {
		return emq(t, "", append([]string{"send", "--broker", b.Frontend(), "--queue", "q"}, args...)...)
	}
	out, stderr, err := send("--priority", "5", "--unique", "order-7", "--unique-for", "1m", "hello")
	holder := strings.TrimSpace(out)
	if err != nil || len(holder) != 36 {
		t.Fatalf("send --priority --unique: %q, %v\n%s", out, err, stderr)
	}
	var ji admin.JobInfo
	if bt.API(t, b, "GET", "/api/v1/jobs/"+holder, "", &ji) != 200 || ji.Priority != 5 || ji.Unique != "order-7" || ji.UniqueFor != 60 {
		t.Fatalf("the job sent: %+v, want priority 5, key order-7 held 60 s", ji)
	}
	for _, args := range [][]string{{"--unique", "order-7", "again"}, {"--unique", "order-7", "--reply", "again"}} {
		out, stderr, err := send(args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitDuplicate || stderr != "duplicate: held by job "+holder+"\n" || out != "" {
			t.Errorf("send %v of a key held: %v, stdout %q, stderr %q; want exit status %d and the holder", args, err, out, stderr, exitDuplicate)
		}
	}
	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{"--priority", "65536"}, "priority: 65536: want 0 to 65535"},
		{[]string{"--unique-for", "1m"}, "unique-for: goes with --unique KEY"},
	} {
		_, stderr, err := send(c.args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr, c.why) {
			t.Errorf("send %v: %v %q, want exit status 1 saying %q", c.args, err, stderr, c.why)
		}
	}
}

// emq jobs show says why it has nothing to show: a done job not kept
// (--retain-done), an empty msgid (the API says so too); and a job kept
// done after one delivery shows no failed attempt beside its trail's
// attempt 1.
func TestJobsShowSaysWhy(t *testing.T) {
	t.Parallel()
	for _, retain := range []bool{false, true} {
		opts := fastBroker
		if retain {
			opts = keepDone
		}
		b := bt.StartAdmin(t, "", opts, nil)
		on := []string{"--admin", b.AdminAddr()}
		client := bt.Dial(t, b.Frontend(), "c")
		worker := bt.Worker(t, b.Backend(), "w", "q")
		id := client.Request("q", "", []byte("x"))
		worker.Ready(1)
		bt.Expect[*emqp.Request](worker)
		worker.Reply(id, []byte("ok"))
		bt.Eventually(t, "replied", func() bool { return b.Stats().Replied == 1 })
		out, stderr, err := emq(t, "", append([]string{"jobs", "show", id}, on...)...)
		if !retain {
			if err == nil || !strings.Contains(stderr, "no such job") || !strings.Contains(stderr, "--retain-done") {
				t.Fatalf("a done job not kept: %v, stderr %q", err, stderr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err, stderr)
		}
		has(t, "a done job kept", out, `(?m)^failed attempts +0$`)
		has(t, "its trail", out, `dispatched .*attempt=1`)
		has(t, "a done job kept", out, `(?m)^state +done$`)

		_, stderr, err = emq(t, "", append([]string{"jobs", "show", ""}, on...)...)
		if err == nil || !strings.Contains(stderr, "msgid is needed") || strings.Contains(stderr, "404") {
			t.Fatalf("jobs show '': %v, stderr %q", err, stderr)
		}
		a, err := admin.NewClient(admin.ClientOptions{Addr: b.AdminAddr()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Job(t.Context(), "", false); err == nil || !strings.Contains(err.Error(), "msgid is needed") {
			t.Fatalf("the API's Job(\"\"): %v", err)
		}
	}
}
