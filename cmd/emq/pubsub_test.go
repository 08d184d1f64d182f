package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	bt "github.com/eventmq/emq/internal/brokertest"
)

// `emq sub --json orders.` prints what `emq pub` publishes to topics that
// start with orders., and stops at SIGINT with status 0.
func TestPubSubCommands(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	sub := exec.Command(os.Args[0], "sub", "--publisher", b.PublisherOutgoing(), "--json", "orders.")
	sub.Env = bt.ChildEnv(mainEnv + "=1")
	var stderr bytes.Buffer
	sub.Stderr = &stderr
	stdout, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	defer sub.Process.Kill()
	lines := make(chan map[string]string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]string
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("not a JSON line: %q", sc.Text())
			}
			lines <- m
		}
		close(lines)
	}()
	pub := func(stdin string, args ...string) {
		t.Helper()
		if _, stderr, err := emq(t, stdin, append([]string{"pub", "--broker", b.Frontend()}, args...)...); err != nil {
			t.Fatalf("emq pub: %v\n%s", err, stderr)
		}
	}
	// The subscription travels asynchronously: publish probes until one comes.
	deadline := time.Now().Add(bt.Wait)
	for probed := false; !probed; {
		if time.Now().After(deadline) {
			t.Fatalf("emq sub never got a probe\n%s", stderr.String())
		}
		pub("", "orders.probe", "probe")
		select {
		case m := <-lines:
			probed = m["topic"] == "orders.probe"
		case <-time.After(100 * time.Millisecond):
		}
	}
	pub("", "users.new", "not for orders.")
	pub("\x00\xff", "orders.eu", "-")
	for m := range lines {
		if m["topic"] == "orders.probe" {
			continue
		}
		if m["topic"] != "orders.eu" || m["payload_base64"] != "AP8=" {
			t.Fatalf("got %v, want orders.eu with its binary payload in base64", m)
		}
		break
	}
	sub.Process.Signal(syscall.SIGINT)
	if err := sub.Wait(); err != nil {
		t.Fatalf("emq sub at SIGINT: %v\n%s", err, stderr.String())
	}
}
