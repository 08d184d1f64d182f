// Package testutil holds the test helpers that every package's tests
// share, internal/zmtp's in-package tests too: it imports only the
// standard library. Helpers that start a broker are in
// internal/brokertest.
package testutil

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// Wait is how long a test waits for something that should happen.
const Wait = 10 * time.Second

// Eventually returns once cond is true, polling it every millisecond at
// first, then every 5 ms; if it is still false after Wait, the test fails with
// what ("the worker connected") and stops.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, Wait, what, cond)
}

// EventuallyWithin is Eventually for a condition that may take longer
// than Wait.
func EventuallyWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond // a quick condition is seen at once, a slow one is not polled hard
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}

// Recv returns the next value ch gives; if none comes within Wait, the
// test fails with what ("the append's outcome") and stops. A test waits
// on a channel through it, so that a lost event fails the test instead
// of hanging it.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	return RecvWithin(t, Wait, ch, what)
}

// RecvWithin is Recv for a value that may take longer than Wait.
func RecvWithin[T any](t testing.TB, within time.Duration, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, within)
	}
	var zero T
	return zero
}

// Python returns the path of a python3 that imports zmq (Debian's
// python3-zmq, on libzmq), with CURVE when curve is set. Without one the
// test is skipped, or fails when EMQ_REQUIRE_INTEROP is set, as it is in
// CI, where a test that did not run must not pass.
func Python(t testing.TB, curve bool) string {
	t.Helper()
	const python = "/usr/bin/python3"
	probe, want := "import zmq", "python3-zmq"
	if curve {
		probe, want = "import zmq; assert zmq.has('curve')", "python3-zmq with CURVE"
	}
	if err := exec.Command(python, "-c", probe).Run(); err != nil {
		Missing(t, "EMQ_REQUIRE_INTEROP", "%s is not installed (apt-get install -y python3-zmq): %v", want, err)
	}
	return python
}

// Missing ends a test that cannot run here: it is skipped with why, or
// fails when the environment sets require (an EMQ_REQUIRE_* switch, as
// .ci/run sets them), where a test that did not run must not pass.
func Missing(t testing.TB, require, why string, args ...any) {
	t.Helper()
	if os.Getenv(require) != "" {
		t.Fatalf(require+" is set: "+why, args...)
	}
	t.Skipf(why, args...)
}
