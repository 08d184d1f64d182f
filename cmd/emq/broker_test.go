package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// `emq broker` drains at the first SIGTERM (not ready, the job in flight
// may finish) and stops at once at the second, with exit status 0.
func TestBrokerSignals(t *testing.T) {
	t.Parallel()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	admin := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	cmd := exec.Command(os.Args[0], "broker", "--frontend", frontend, "--backend", backend, "--admin", admin,
		"--data-dir", t.TempDir(), "--publisher-incoming", "", "--publisher-outgoing", "", "--drain-timeout", "1h", "--heartbeat-interval", "100ms", "--heartbeat-timeout", "1s")
	cmd.Env = bt.ChildEnv(mainEnv + "=1")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	readyz := func() int {
		resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + admin + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	bt.Eventually(t, "emq broker ready", func() bool { return readyz() == http.StatusOK })

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
