package broker_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// EventMQ's own client (its source named by EMQ_EVENTMQ_SRC) puts
// tenant:acme among a REQUEST's headers and a schedule's: both jobs are
// acme's, served in its turn, and a worker gets the header as sent.
func TestEventMQClientSendsATenant(t *testing.T) {
	t.Parallel()
	src := os.Getenv("EMQ_EVENTMQ_SRC")
	if src == "" {
		testutil.Missing(t, "EMQ_REQUIRE_EVENTMQ", "EMQ_EVENTMQ_SRC is not set: it names a checkout of github.com/eventmq/eventmq, whose client this test runs")
	}
	python := testutil.Python(t, false)
	b := bt.Start(t, "", fast)
	change(t, b, "default", broker.QueueChange{Paused: ptr(true)})
	cmd := exec.Command(python, "testdata/eventmq_tenant.py", b.Frontend())
	cmd.Env = append(os.Environ(), "PYTHONPATH="+src, "EVENTMQ_CONFIG_FILE="+t.TempDir()+"/none.conf")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("EventMQ's client: %v\n%s", err, out)
	}
	job := strings.TrimSpace(string(out))
	bt.Eventually(t, "the job and the schedule's first fire, acme's", func() bool {
		page, err := b.Tenants(context.Background(), "default", 0, 0)
		return err == nil && len(page.Tenants) == 1 && page.Tenants[0].Name == "acme" && page.Tenants[0].Pending == 2
	})
	if w := why(t, b, job); w.Tenant != "acme" || w.Reason != broker.WhyQueuePaused {
		t.Fatalf("why the EventMQ client's job waits: %+v", w)
	}
	change(t, b, "default", broker.QueueChange{Paused: ptr(false)})
	w := bt.Worker(t, b.Backend(), "w", "default")
	w.Ready(2)
	for range 2 {
		r := bt.Expect[*emqp.Request](w)
		if tenantOf(r) != "acme" {
			t.Fatalf("the worker got %s with headers %q, want tenant:acme", r.MsgID, r.Headers.String())
		}
	}
}
