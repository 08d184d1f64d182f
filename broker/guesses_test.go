package broker

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// Checks count within GuessWindow of an address's first; MaxGuesses and
// the address is refused until the window has passed; a right password
// takes its check back; the addresses tracked stay bounded.
func TestGuessesWindow(t *testing.T) {
	var g guesses
	t0 := time.Unix(1_000_000, 0)
	for i := range MaxGuesses {
		if !g.attempt("192.0.2.1", t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("refused at the %d-th check", i+1)
		}
	}
	if g.attempt("192.0.2.1", t0.Add(30*time.Second)) {
		t.Fatal("a check allowed after MaxGuesses")
	}
	if !g.attempt("192.0.2.2", t0) {
		t.Fatal("another address refused")
	}
	if !g.attempt("192.0.2.1", t0.Add(GuessWindow)) {
		t.Fatal("still refused once the window has passed")
	}
	// A right password gives its check back, and no more.
	for range MaxGuesses - 1 {
		g.attempt("192.0.2.3", t0)
	}
	g.attempt("192.0.2.3", t0)
	g.takeBack("192.0.2.3")
	if !g.attempt("192.0.2.3", t0) {
		t.Fatal("a right password's check was not given back")
	}
	if g.attempt("192.0.2.3", t0) {
		t.Fatal("a right password cleared the wrong ones before it")
	}
	for i := range maxGuessers + 100 {
		g.attempt(fmt.Sprint("198.51.100.", i), t0)
	}
	if len(g.m) > maxGuessers {
		t.Fatalf("%d addresses tracked, over %d", len(g.m), maxGuessers)
	}
}

func TestGuessKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:1234":                "192.0.2.7",
		"[::ffff:192.0.2.7]:1234":       "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:1234":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff:ee:dd:cc]:99": "2001:db8:1:2::/64",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := guessKey(a); got != want {
			t.Errorf("%s counts as %q, want %q", addr, got, want)
		}
	}
}
