package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
)

// emq keygen and emq passwd make what a CURVE and PLAIN broker reads; a
// real `emq broker` child serves `emq send` and `emq worker` with keys,
// refuses the wrong ones, and re-reads its clients at SIGHUP.
func TestKeysPasswdAndSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := func(name string) string { return filepath.Join(dir, name) }
	for _, name := range []string{"broker", "app", "runner"} {
		if out, stderr, err := emq(t, "", "keygen", in(name)); err != nil || !strings.Contains(out, ".pub") {
			t.Fatalf("keygen %s: %q %v\n%s", name, out, err, stderr)
		}
	}
	st, err := os.Stat(in("broker.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("broker.key mode %v %v, want 0600", st.Mode(), err)
	}
	if _, _, err := emq(t, "", "keygen", in("broker")); err == nil {
		t.Fatal("keygen replaced an existing key without --force")
	}
	pub := func(name string) string {
		b, err := os.ReadFile(in(name + ".pub"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zmtp.ParseKey(string(b)); err != nil {
			t.Fatalf("%s.pub: %v", name, err)
		}
		return strings.TrimSpace(string(b))
	}
	clients := in("clients")
	write := func(text string) {
		if err := os.WriteFile(clients, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# who may connect\n" + pub("app") + " client\n" + pub("runner") + " worker\n")
	users := in("users")
	if out, stderr, err := emq(t, "s3cret\n", "passwd", users, "ann", "client"); err != nil || !strings.Contains(out, "added ann") {
		t.Fatalf("passwd: %q %v\n%s", out, err, stderr)
	}
	if out, _, err := emq(t, "n3w\n", "passwd", users, "ann", "client,worker"); err != nil || !strings.Contains(out, "replaced ann") {
		t.Fatalf("passwd again: %q %v", out, err)
	}
	if b, _ := os.ReadFile(users); strings.Count(string(b), "ann:") != 1 || !strings.Contains(string(b), ":client,worker") {
		t.Fatalf("users file: %s", b)
	}

	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	bp := startBrokerProcess(t, "--frontend", frontend, "--backend", backend,
		"--data-dir", t.TempDir(), "--publisher-incoming", "", "--publisher-outgoing", "",
		"--curve-secret-key-file", in("broker.key"), "--curve-clients", clients, "--plain-users", users)
	logs := bp.logs

	startWorkerProcess(t, "--broker", backend, "--queues", "upper", "--exec", "tr a-z A-Z",
		"--curve-server-key", in("broker.pub"), "--curve-key-file", in("runner.key"))
	curve := []string{"--curve-server-key", pub("broker"), "--curve-key-file", in("app.key")}
	sendWithin := func(wait string, extra ...string) (string, string, error) {
		return emq(t, "", append(append([]string{"send", "--broker", frontend, "--queue", "upper", "--reply", "--wait", wait}, extra...), "hello")...)
	}
	send := func(extra ...string) (string, string, error) { return sendWithin("3s", extra...) }
	// A deadline, not a speed: under the race detector on two busy cores a
	// bcrypt check (PLAIN) and a worker's exec take seconds.
	if out, stderr, err := sendWithin("15s", curve...); err != nil || out != "HELLO" {
		t.Fatalf("send by CURVE: %q %v\n%s\n%s", out, err, stderr, logs.String())
	}
	if out, stderr, err := sendWithin("15s", "--plain-user", "ann", "--plain-password", "n3w"); err != nil || out != "HELLO" {
		t.Fatalf("send by PLAIN: %q %v\n%s", out, err, stderr)
	}
	if _, stderr, err := send("--plain-user", "ann", "--plain-password", "s3cret"); err == nil || !strings.Contains(stderr, "refused") {
		t.Fatalf("the old password: %v\n%s", err, stderr)
	}
	if _, stderr, err := send("--curve-server-key", pub("broker"), "--curve-key-file", in("runner.key")); err == nil || !strings.Contains(stderr, "forbidden") {
		t.Fatalf("a worker's key sending: %v\n%s", err, stderr)
	}
	if _, _, err := send(); err == nil {
		t.Fatal("a NULL send got through")
	}
	if _, stderr, err := send("--curve-server-key", in("broker.key"), "--curve-key-file", in("app.key")); err == nil || !strings.Contains(stderr, "secret key file") {
		t.Fatalf("the broker's secret key as the server key: %v\n%s", err, stderr)
	}
	if _, stderr, err := send("--curve-server-key", in("broker.pub"), "--curve-key-file", in("app.pub")); err == nil || !strings.Contains(stderr, "public key file") {
		t.Fatalf("a public key as this peer's secret: %v\n%s", err, stderr)
	}

	// The app's key removed, SIGHUP: it cannot connect again.
	write(pub("runner") + " worker\n")
	bp.cmd.Process.Signal(syscall.SIGHUP)
	bt.Eventually(t, "credentials re-read", func() bool { return strings.Contains(logs.String(), "credentials re-read") })
	if _, stderr, err := send(curve...); err == nil || !strings.Contains(stderr, "refused") {
		t.Fatalf("a removed key after SIGHUP: %v\n%s", err, stderr)
	}
}
