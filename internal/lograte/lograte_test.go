package lograte

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a time the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// limiter is a Limiter on a test clock, and what it logs, without times.
func limiter(burst int) (*Limiter, *clock, *bytes.Buffer) {
	c := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := New(burst, "things not logged in the last second")
	l.now = c.now
	return l, c, &bytes.Buffer{}
}

func logger(out *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
}

func TestBurstThenSummary(t *testing.T) {
	l, c, out := limiter(3)
	log := logger(out)
	for i := range 5 {
		l.Warn(log, "thing", "n", i)
	}
	c.t = c.t.Add(999 * time.Millisecond)
	l.Warn(log, "thing", "n", 5) // still the first second: held back
	c.t = c.t.Add(time.Millisecond)
	l.Warn(log, "thing", "n", 6)
	c.t = c.t.Add(time.Second) // a second with nothing held back: no summary
	l.Warn(log, "thing", "n", 7)
	want := `level=WARN msg=thing n=0
level=WARN msg=thing n=1
level=WARN msg=thing n=2
level=WARN msg="things not logged in the last second" count=3
level=WARN msg=thing n=6
level=WARN msg=thing n=7
`
	if out.String() != want {
		t.Fatalf("logged:\n%s\nwant:\n%s", out, want)
	}
}

// The summary waits for the next event, however late it comes.
func TestSummaryWithTheNextEvent(t *testing.T) {
	l, c, out := limiter(1)
	log := logger(out)
	if !l.Allow(log) || l.Allow(log) || l.Allow(log) {
		t.Fatal("a burst of 1 should let the first line through and hold the rest back")
	}
	c.t = c.t.Add(time.Hour)
	if out.Len() != 0 {
		t.Fatalf("logged before the next event: %s", out)
	}
	if !l.Allow(log) {
		t.Fatal("the first line of a later second was held back")
	}
	if want := "level=WARN msg=\"things not logged in the last second\" count=2\n"; out.String() != want {
		t.Fatalf("logged %q, want %q", out, want)
	}
}

func TestBurstAtLeastOne(t *testing.T) {
	l, _, out := limiter(0)
	if !l.Allow(logger(out)) {
		t.Fatal("a burst of 0 held back the first line")
	}
}

// Goroutines that share a Limiter get the burst between them, no more.
func TestConcurrent(t *testing.T) {
	l, c, out := limiter(50)
	log := logger(out)
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if l.Allow(log) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 50 {
		t.Fatalf("%d lines allowed in one second, want 50", n)
	}
	c.t = c.t.Add(time.Second)
	l.Allow(log)
	if got := strings.TrimSpace(out.String()); got != `level=WARN msg="things not logged in the last second" count=750` {
		t.Fatalf("logged %q, want the summary of 750", got)
	}
}
