package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// `emq broker` drains at the first SIGTERM (not ready, the job in flight
// may finish) and stops at once at the second, with exit status 0.
func TestBrokerSignals(t *testing.T) {
	t.Parallel()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	bp := startBrokerProcess(t, "--frontend", frontend, "--backend", backend,
		"--data-dir", t.TempDir(), "--publisher-incoming", "", "--publisher-outgoing", "", "--drain-timeout", "1h", "--heartbeat-interval", "100ms", "--heartbeat-timeout", "1s")
	cmd, exited, logs, readyz := bp.cmd, bp.exited, bp.logs, bp.readyz

	client := bt.Dial(t, frontend, "c")
	worker := bt.Worker(t, backend, "w", "q")
	worker.Ready(1)
	client.Request("q", "", []byte("slow"))
	bt.Expect[*emqp.Request](worker)

	cmd.Process.Signal(syscall.SIGTERM)
	bt.Eventually(t, "/readyz not ready after the first SIGTERM", func() bool { return readyz() == http.StatusServiceUnavailable })
	select {
	case err := <-exited:
		t.Fatalf("emq broker exited (%v) at the first SIGTERM with a job in flight\n%s", err, logs.String())
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("emq broker exited with %v\n%s", err, logs.String())
		}
	case <-time.After(bt.Wait):
		t.Fatalf("emq broker still running after the second SIGTERM\n%s", logs.String())
	}
	bt.Expect[*emqp.Kbye](worker)
	if !strings.Contains(logs.String(), "drain cut short") {
		t.Errorf("the log does not say the drain was cut short:\n%s", logs.String())
	}
}

// brokerProcess is `emq broker` running as a child of the test.
type brokerProcess struct {
	cmd    *exec.Cmd
	admin  string           // host:port of its admin API
	exited chan error       // its exit, once (put back what you take)
	logs   *testutil.Buffer // its standard error
}

// startBrokerProcess runs `emq broker ARGS --admin FREE` until the test
// ends, and returns once /readyz says it is ready.
func startBrokerProcess(t *testing.T, args ...string) *brokerProcess {
	t.Helper()
	return startBrokerProcessEnv(t, nil, args...)
}

// startBrokerProcessEnv is startBrokerProcess with env added to the
// broker's environment.
func startBrokerProcessEnv(t *testing.T, env []string, args ...string) *brokerProcess {
	t.Helper()
	bp := spawnBrokerProcess(t, env, args...)
	bt.Eventually(t, "emq broker ready", func() bool { return bp.readyz() == http.StatusOK })
	return bp
}

// spawnBrokerProcess starts emq broker as startBrokerProcessEnv does, and
// returns at once, before it serves.
func spawnBrokerProcess(t *testing.T, env []string, args ...string) *brokerProcess {
	t.Helper()
	bp := &brokerProcess{admin: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), exited: make(chan error, 1), logs: new(testutil.Buffer)}
	bp.cmd = exec.Command(os.Args[0], append(append([]string{"broker"}, args...), "--admin", bp.admin)...)
	bp.cmd.Env = bt.ChildEnv(append(env, mainEnv+"=1")...)
	bp.cmd.Stderr = bp.logs
	if err := bp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { bp.exited <- bp.cmd.Wait() }()
	t.Cleanup(func() {
		bp.cmd.Process.Kill()
		<-bp.exited
	})
	return bp
}

// readyz is the status of its /readyz (0 when it does not answer).
func (bp *brokerProcess) readyz() int {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + bp.admin + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
