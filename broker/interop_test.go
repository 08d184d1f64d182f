package broker_test

import (
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
