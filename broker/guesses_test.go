package broker

import (
	"fmt"
	"testing"
	"time"
)

// The guesses of one address are counted within GuessWindow from the
// first, then forgotten; a right password forgets them at once; the
// addresses tracked stay bounded.
func TestGuessesWindow(t *testing.T) {
	var g guesses
	t0 := time.Unix(1_000_000, 0)
	for i := range MaxGuesses {
		if g.blocked("192.0.2.1", t0) {
			t.Fatalf("blocked after %d wrong passwords", i)
		}
		g.note("192.0.2.1", false, t0.Add(time.Duration(i)*time.Second))
	}
	if !g.blocked("192.0.2.1", t0.Add(30*time.Second)) {
		t.Fatal("not blocked after MaxGuesses wrong passwords")
	}
	if g.blocked("192.0.2.2", t0) {
		t.Fatal("another address blocked")
	}
	if g.blocked("192.0.2.1", t0.Add(GuessWindow)) {
		t.Fatal("still blocked once the window has passed")
	}
	g.note("192.0.2.1", false, t0.Add(GuessWindow)) // a new window, one guess
	if g.blocked("192.0.2.1", t0.Add(GuessWindow+time.Second)) {
		t.Fatal("one wrong password in a new window blocks")
	}
	g.note("192.0.2.1", true, t0.Add(GuessWindow))
	if _, ok := g.m["192.0.2.1"]; ok {
		t.Fatal("a right password does not forget the address")
	}
	for i := range maxGuessers + 100 {
		g.note(fmt.Sprint("198.51.100.", i), false, t0)
	}
	if len(g.m) > maxGuessers {
		t.Fatalf("%d addresses tracked, over %d", len(g.m), maxGuessers)
	}
}
