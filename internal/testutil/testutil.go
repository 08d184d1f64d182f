// Package testutil holds the test helpers that every package's tests
// share, internal/zmtp's in-package tests too: it imports only the
// standard library. Helpers that start a broker are in
// internal/brokertest.
package testutil

import (
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
