package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/store"
)

// The CLI tests run this test binary as the emq command: with mainEnv set,
// TestMain runs main instead of the tests.
const mainEnv = "EMQ_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfAsked()
	if os.Getenv(mainEnv) != "" {
		if path := os.Getenv(clockEnv); path != "" {
			scheduleClock = steppedClock(path)
		}
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, etcdtest.Leftovers...)
}

// emq runs the emq command with args and stdin; it returns stdout, stderr
// and the exit error.
func emq(t testing.TB, stdin string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = bt.ChildEnv(mainEnv + "=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// startWorkerProcess runs `emq worker` until the test ends.
func startWorkerProcess(t *testing.T, args ...string) {
	t.Helper()
	startWorkerProcessEnv(t, nil, args...)
}

// startWorkerProcessEnv is startWorkerProcess with env added to the
// worker's environment.
func startWorkerProcessEnv(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"worker", "--heartbeat-interval", "100ms",
		"--heartbeat-timeout", "1s", "--grace", "2s"}, args...)...)
	cmd.Env = bt.ChildEnv(append(env, mainEnv+"=1")...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("emq worker exited with %v\n%s", err, logs.String())
			}
		case <-time.After(bt.Wait):
			cmd.Process.Kill()
			t.Errorf("emq worker did not stop on SIGTERM\n%s", logs.String())
		}
	})
}

func fastBroker(o *broker.Options) {
	o.HeartbeatInterval, o.HeartbeatTimeout = 100*time.Millisecond, time.Second
	o.RetryBackoff = 10 * time.Millisecond
}

func TestSendAndWorkerExec(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fastBroker)
	startWorkerProcess(t, "--broker", b.Backend(), "--queues", "upper,env", "--concurrency", "2",
		"--exec", `if [ "$EMQ_QUEUE" = env ]; then echo "$EMQ_HEADER_COLOUR $EMQ_ATTEMPT"; else tr a-z A-Z; fi`)

	out, stderr, err := emq(t, "", "send", "--broker", b.Frontend(), "--queue", "upper", "--reply", "hello")
	if err != nil || out != "HELLO" {
		t.Fatalf("send --reply: %q, %v\n%s", out, err, stderr)
	}
	out, stderr, err = emq(t, "from stdin", "send", "--broker", b.Frontend(), "--queue", "upper", "--reply", "-")
	if err != nil || out != "FROM STDIN" {
		t.Fatalf("send - : %q, %v\n%s", out, err, stderr)
	}
	out, stderr, err = emq(t, "", "send", "--broker", b.Frontend(), "--queue", "env", "--reply", "--header", "colour=blue")
	if err != nil || out != "blue 1\n" {
		t.Fatalf("headers in the environment: %q, %v\n%s", out, err, stderr)
	}
	out, stderr, err = emq(t, "", "send", "--broker", b.Frontend(), "--queue", "upper", "x")
	if err != nil || len(strings.TrimSpace(out)) != 36 {
		t.Fatalf("send without --reply prints the msgid: %q, %v\n%s", out, err, stderr)
	}
}

func TestSendRefusedExitsNonZero(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.MaxPending = 1 })
	if _, stderr, err := emq(t, "", "send", "--broker", b.Frontend(), "--queue", "q", "one"); err != nil {
		t.Fatal(err, stderr)
	}
	_, stderr, err := emq(t, "", "send", "--broker", b.Frontend(), "--queue", "q", "two")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(stderr, "queue_full") {
		t.Fatalf("refused send: %v, stderr %q", err, stderr)
	}
}

// emq send to an endpoint where nothing listens says so at once, naming
// it, not after --wait; --wait stays for a broker that does not answer.
func TestSendNoBroker(t *testing.T) {
	t.Parallel()
	var exit *exec.ExitError
	free := bt.FreeEndpoint(t)
	for _, args := range [][]string{{"x"}, {"--reply", "x"}, {"--bulk", "-"}} {
		args = append([]string{"send", "--broker", free, "--wait", "20s"}, args...)
		_, stderr, err := emq(t, `{"payload": "x"}`, args...)
		if !errors.As(err, &exit) || !strings.Contains(stderr, free) || !strings.Contains(stderr, "nothing listens") {
			t.Fatalf("%v without a broker: %v, stderr %q", args, err, stderr)
		}
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never greets
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 16)
	t.Cleanup(func() {
		silent.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	go func() {
		for {
			nc, err := silent.Accept()
			if err != nil {
				return
			}
			held <- nc
		}
	}()
	_, stderr, err := emq(t, "", "send", "--broker", "tcp://"+silent.Addr().String(), "--wait", "200ms", "x")
	if !errors.As(err, &exit) || !strings.Contains(stderr, "no ACK") {
		t.Fatalf("send to a silent broker: %v, stderr %q", err, stderr)
	}
}

func TestWorkerExecFailureAndTimeout(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fastBroker)
	pidFile := filepath.Join(t.TempDir(), "pgid")
	startWorkerProcess(t, "--broker", b.Backend(), "--queues", "fail,slow", "--concurrency", "2",
		"--exec", `if [ "$EMQ_QUEUE" = fail ]; then echo boom >&2; exit 3; fi; echo $$ > `+pidFile+`; sleep 60 & wait`)

	if _, stderr, err := emq(t, "", "send", "--broker", b.Frontend(), "--queue", "fail", "--retry-count", "0", "x"); err != nil {
		t.Fatal(err, stderr)
	}
	bt.Eventually(t, "the failing job dead-lettered", func() bool { return b.Stats().DeadLettered == 1 })

	if _, stderr, err := emq(t, "", "send", "--broker", b.Frontend(), "--queue", "slow", "--timeout", "1s", "--retry-count", "0", "x"); err != nil {
		t.Fatal(err, stderr)
	}
	bt.Eventually(t, "the slow job FAILed", func() bool { return b.Stats().DeadLettered == 2 })
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	bt.Eventually(t, "the job's process group killed", func() bool {
		return syscall.Kill(-pgid, 0) == syscall.ESRCH
	})
	page, err := b.Journal(t).List(store.ListOptions{Queue: "fail", State: store.Dead})
	if err != nil || len(page.Jobs) != 1 || !strings.Contains(page.Jobs[0].LastError, "boom") {
		t.Fatalf("dead job of the failing command: %+v %v; want stderr's tail as its reason", page.Jobs, err)
	}
}
