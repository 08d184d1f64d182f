package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// A libzmq peer (Debian's python3-zmq) is client, worker and EventMQ-style
// scheduler against the broker. .ci/run installs python3-zmq and sets
// EMQ_REQUIRE_INTEROP=1, so there a missing module fails instead of
// skipping.
func TestInteropLibzmq(t *testing.T) {
	t.Parallel()
	python := pythonZMQ(t)
	// HEARTBEATs once a second, the default; the EventMQ scheduler's part
	// needs schedules passed to it.
	b := bt.Start(t, "", func(o *broker.Options) { o.ForwardSchedules = true })
	out, err := exec.Command(python, "testdata/interop.py", b.Frontend(), b.Backend()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("interop.py: %v\n%s", err, out)
	}
}

// pythonZMQ is a Python with the zmq module, or the test is skipped (or,
// under EMQ_REQUIRE_INTEROP, fails).
func pythonZMQ(t *testing.T) string {
	t.Helper()
	return testutil.Python(t, false)
}

// EventMQ's client SCHEDULE and UNSCHEDULE frames from a libzmq peer,
// against a broker that keeps the schedules: the job runs on a worker at
// once and again each interval, the same SCHEDULE twice is one schedule,
// a bad cron expression is refused, and UNSCHEDULE stops the fires.
func TestInteropLibzmqSchedules(t *testing.T) {
	t.Parallel()
	python := pythonZMQ(t)
	b := bt.StartAdmin(t, "", func(o *broker.Options) {}, nil)
	out, err := exec.Command(python, "testdata/interop_schedules.py", b.Frontend(), b.Backend(), b.AdminAddr()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("interop_schedules.py: %v\n%s", err, out)
	}
}

// The headers and commands of issue 30 from a libzmq peer: priorities
// order a queue, a unique key refuses a second job naming the first, bad
// values are refused by name, a client's CANCEL reaches the running job's
// worker (its late REPLY ignored), and a worker's PROGRESS is kept.
func TestInteropLibzmqJobControls(t *testing.T) {
	t.Parallel()
	python := pythonZMQ(t)
	b := bt.Start(t, "", nil)
	cmd := exec.Command(python, "testdata/interop_jobs.py", b.Frontend(), b.Backend())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		cmd.Wait()
		t.Fatalf("interop_jobs.py ended before its progress step:\n%s", stderr.String())
	}
	word, job, _ := strings.Cut(lines.Text(), " ")
	if word != "progress" {
		t.Fatalf("interop_jobs.py said %q", lines.Text())
	}
	p, err := b.JobProgress(context.Background(), job)
	if err != nil || p == nil || p.Percent != 50 || p.Note != "halfway" {
		t.Errorf("progress of %s from the libzmq worker: %+v, %v", job, p, err)
	}
	fmt.Fprintln(stdin, "go")
	lines.Scan()
	if err := cmd.Wait(); err != nil || lines.Text() != "ok" {
		t.Fatalf("interop_jobs.py: %v, last line %q\n%s", err, lines.Text(), stderr.String())
	}
}

// BULK from a libzmq peer: 1,000 jobs ACKed once under the bulk's msgid,
// the same jobs again ACKed and not stored twice, delivered in order; a
// BULK with a bad job refused by one ERROR naming it.
func TestInteropLibzmqBulk(t *testing.T) {
	t.Parallel()
	python := pythonZMQ(t)
	b := bt.Start(t, "", nil)
	out, err := exec.Command(python, "testdata/interop_bulk.py", b.Frontend(), b.Backend()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("interop_bulk.py: %v\n%s", err, out)
	}
}
