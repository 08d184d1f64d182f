// Package lograte keeps a flood of the same kind of line from flooding
// the log: a Limiter lets so many lines a second through, and says how
// many it held back when the next second starts.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter lets Burst lines a second through; it is safe for concurrent
// use. The zero value lets nothing through; use New.
type Limiter struct {
	burst   int
	summary string           // the line that counts what was held back
	now     func() time.Time // the clock (tests set it)

	mu      sync.Mutex
	second  time.Time
	n, held int
}

// New lets burst lines a second through; summary is the words of the
// line that then counts those held back ("protocol errors not logged in
// the last second").
func New(burst int, summary string) *Limiter {
	return &Limiter{burst: burst, summary: summary, now: time.Now}
}

// WithClock makes l count seconds by now (tests).
func (l *Limiter) WithClock(now func() time.Time) *Limiter {
	l.now = now
	return l
}

// Warn logs msg at warning level unless the second's burst is spent.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	if l.Allow(log) {
		log.Warn(msg, args...)
	}
}

// Allow reports whether one more line may go out now; at the start of a
// second it first logs the count of the last second's held back lines.
func (l *Limiter) Allow(log *slog.Logger) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.second) >= time.Second {
		if l.held > 0 {
			log.Warn(l.summary, "count", l.held)
		}
		l.second, l.n, l.held = now, 0, 0
	}
	if l.n >= l.burst {
		l.held++
		return false
	}
	l.n++
	return true
}
