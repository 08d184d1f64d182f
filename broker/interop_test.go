package broker_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// A libzmq peer (Debian's python3-zmq) is client, worker and EventMQ-style
// scheduler against the broker. .ci/run installs python3-zmq and sets
// EMQ_REQUIRE_INTEROP=1, so there a missing module fails instead of
// skipping.
func TestInteropLibzmq(t *testing.T) {
	t.Parallel()
	python := "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import zmq").Run(); err != nil {
		if os.Getenv("EMQ_REQUIRE_INTEROP") != "" {
			t.Fatalf("python3-zmq is required: %v", err)
		}
		t.Skip("python3-zmq is not installed (apt-get install -y python3-zmq)")
	}
	// HEARTBEATs once a second, the default; the EventMQ scheduler's part
	// needs schedules passed to it.
	b := bt.Start(t, "", func(o *broker.Options) { o.ForwardSchedules = true })
	out, err := exec.Command(python, "testdata/interop.py", b.Frontend(), b.Backend()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("interop.py: %v\n%s", err, out)
	}
}
