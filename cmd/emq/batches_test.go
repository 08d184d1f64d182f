package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/eventmq/emq/admin"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// emq send --batch, --after and --after-batch make a workflow; emq jobs
// show names a job's parents and children; emq batches open, ls, show
// and close see and drive the batch; bad workflow flags exit 1 by name.
func TestWorkflowCLI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fastBroker, nil)
	run := func(args ...string) string {
		t.Helper()
		out, stderr, err := emq(t, "", args...)
		if err != nil {
			t.Fatalf("emq %v: %v\n%s", args, err, stderr)
		}
		return out
	}
	send := func(args ...string) string {
		return strings.TrimSpace(run(append([]string{"send", "--broker", b.Frontend(), "--queue", "q"}, args...)...))
	}
	adm := "--admin=" + b.AdminAddr()
	if out := run("batches", "open", "nightly", adm); !hasLine(out, "state", "open") {
		t.Fatalf("batches open:\n%s", out)
	}
	p1 := send("--batch", "nightly", "one")
	p2 := send("--batch", "nightly", "two")
	child := send("--after", p1+","+p2, "--after-failed", "run", "both")
	cb := send("--after-batch", "nightly", "callback")
	show := run("jobs", "show", child, adm)
	for _, want := range [][]string{{"state", "waiting"}, {"after", p1, "(pending)"}, {p2, "(pending)"}, {"after", "failed", "run"}, {"waits", "for", "2", "more"}} {
		if !hasLine(show, want...) {
			t.Errorf("jobs show of the child lacks %q:\n%s", want, show)
		}
	}
	if show := run("jobs", "show", p1, adm); !hasLine(show, "batch", "nightly") || !hasLine(show, "waited", "for", "by", child) {
		t.Errorf("jobs show of a parent:\n%s", show)
	}
	if ls := run("jobs", "ls", "--state", "waiting", adm); !strings.Contains(ls, child) || !strings.Contains(ls, cb) {
		t.Errorf("jobs ls --state waiting:\n%s", ls)
	}
	if ls := run("batches", "ls", adm); !hasLine(ls, "nightly", "open", "0", "2", "0", "0", "0", "0", "1") {
		t.Errorf("batches ls:\n%s", ls)
	}
	var bi admin.BatchInfo
	bt.API(t, b, "GET", "/api/v1/batches/nightly", "", &bi)
	if bi.Pending != 2 || bi.Waiters != 1 {
		t.Errorf("the batch: %+v", bi)
	}
	if out := run("batches", "close", "nightly", adm); !hasLine(out, "state", "running") {
		t.Errorf("batches close:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{"--after-failed", "maybe"}, `after-failed: "maybe": want cancel or run`},
		{[]string{"--batch-open"}, "batch-open: goes with --batch NAME"},
		{[]string{"--after", "never-stored"}, "bad_request"},
	} {
		_, stderr, err := emq(t, "", append([]string{"send", "--broker", b.Frontend(), "--queue", "q"}, c.args...)...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr, c.why) {
			t.Errorf("send %v: %v %q; want exit status 1 saying %q", c.args, err, stderr, c.why)
		}
	}
}

// hasLine reports whether a line of out starts with the words fields.
func hasLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}
