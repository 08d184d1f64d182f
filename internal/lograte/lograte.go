// Package lograte keeps a flood of like events from flooding the log. A
// Limiter lets a burst of lines a second through and counts the rest;
// the first time it is asked in a later second it first logs one
// summary line, in the caller's words, with how many it held back:
//
//	second 1: line, line, ... line (burst), held, held, held
//	second 2: "protocol errors not logged in the last second" count=3, line, ...
//
// No goroutine: a count held back at the end of a flood is logged with
// the next event, whenever that comes.
package lograte

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter is the rate of one kind of log line. It is safe for
// concurrent use.
type Limiter struct {
	burst   int
	summary string
	now     func() time.Time // time.Now, or a test's clock

	mu      sync.Mutex
	second  time.Time // when the current second began
	lines   int       // logged in it
	dropped int       // held back in it
}

// New makes a Limiter that lets burst lines a second through (at least
// one) and sums up the rest with summary, e.g. "protocol errors not
// logged in the last second".
func New(burst int, summary string) *Limiter {
	return &Limiter{burst: max(burst, 1), summary: summary, now: time.Now}
}

// Allow reports whether a line may be logged now, counting it either
// way. When a new second begins after lines were held back, it first
// logs the summary at Warn on log, with their number as "count". Use it
// where the line's level is not Warn or its arguments cost something to
// make:
//
//	if l.Allow(log) {
//		log.Info("handshake failed", "remote", addr, "err", err)
//	}
func (l *Limiter) Allow(log *slog.Logger) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.second) >= time.Second {
		if l.dropped > 0 {
			log.Warn(l.summary, "count", l.dropped)
		}
		l.second, l.lines, l.dropped = now, 0, 0
	}
	if l.lines >= l.burst {
		l.dropped++
		return false
	}
	l.lines++
	return true
}

// Warn logs msg and args at Warn on log if Allow lets it.
func (l *Limiter) Warn(log *slog.Logger, msg string, args ...any) {
	if l.Allow(log) {
		log.Warn(msg, args...)
	}
}
