package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// EventMQ's own emq-cli (its source named by EMQ_EVENTMQ_SRC), run as its
// users run it against the admin port: status, show_workers and
// show_schedulers print what the broker holds, and shutdown stops the
// broker gracefully (it exits 0).
func TestEventMQCLI(t *testing.T) {
	t.Parallel()
	src := os.Getenv("EMQ_EVENTMQ_SRC")
	if src == "" {
		testutil.Missing(t, "EMQ_REQUIRE_EVENTMQ", "EMQ_EVENTMQ_SRC is not set: it names a checkout of github.com/eventmq/eventmq, whose emq-cli this test runs")
	}
	python := testutil.Python(t, false)
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	bp := startBrokerProcess(t, "--frontend", frontend, "--backend", backend, "--data-dir", t.TempDir(),
		"--publisher-incoming", "", "--publisher-outgoing", "")
	w := bt.Worker(t, backend, "w-reports", "reports")
	w.Ready(2)
	w.KeepAlive(100 * time.Millisecond)
	s := bt.Dial(t, backend, "the-scheduler")
	s.InformScheduler()
	s.KeepAlive(100 * time.Millisecond)
	c := bt.Dial(t, frontend, "c")
	c.Request("waiting", "", []byte("x"))

	cli := exec.Command(python, src+"/bin/emq-cli", "-a", "tcp://"+bp.admin)
	cli.Env = append(os.Environ(), "PYTHONPATH="+src, "EVENTMQ_CONFIG_FILE="+t.TempDir()+"/none.conf")
	cli.Stdin = strings.NewReader("status\nshow_workers\nshow_schedulers\nshutdown\nquit\n")
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Fatalf("emq-cli: %v\n%s", err, out)
	}
	t.Logf("emq-cli:\n%s", out)
	for _, want := range []string{"'waiting_messages_by_queue': {", "'waiting': 1", "'connected_workers': {", "'w-reports'",
		"'available_slots': 2", "'connected_queues': {'reports': [[10, 'w-reports']]}", "'connected_schedulers': {'the-scheduler'", "ACK"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("emq-cli's output has no %q:\n%s", want, out)
		}
	}
	select {
	case err := <-bp.exited:
		bp.exited <- err
		if err != nil {
			t.Fatalf("the broker after emq-cli's shutdown: %v\n%s", err, bp.logs.String())
		}
	case <-time.After(bt.Wait):
		t.Fatalf("the broker still runs after emq-cli's shutdown\n%s", bp.logs.String())
	}
}
