package redial

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := New(500 * time.Millisecond)
	ms := time.Millisecond
	for i, want := range []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms} {
		if d := b.Delay(); d != want {
			t.Fatalf("Delay before failure %d: %v, want %v", i+1, d, want)
		}
		if d := b.Next(); d != want {
			t.Fatalf("failure %d: wait %v, want %v", i+1, d, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != 50*ms {
		t.Fatalf("after Reset: wait %v, want 50ms", d)
	}
	if d := New(10 * ms).Next(); d != 10*ms {
		t.Fatalf("a cap below the first wait: %v, want the cap", d)
	}
}

func TestWait(t *testing.T) {
	done := make(chan struct{})
	if !Wait(0, done) {
		t.Fatal("Wait(0) with done open reported a stop")
	}
	close(done)
	if Wait(time.Hour, done) {
		t.Fatal("Wait with done closed waited")
	}
}
