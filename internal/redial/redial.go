// Package redial paces a peer's attempts to reach its broker: the
// client's, the subscriber's and the worker's loops wait the same way
// after a failed dial or a lost connection.
//
//	fail: 50 ms, fail: 100 ms, fail: 200 ms, ... fail: the cap, the cap, ...
//	success (Reset), connection lost: 50 ms again
package redial

import "time"

// first is the wait after the first failure, and after a success.
const first = 50 * time.Millisecond

// Backoff is how long a peer waits before it tries again. One loop owns
// it: it is not safe for concurrent use.
type Backoff struct {
	max  time.Duration
	next time.Duration
}

// New makes a Backoff whose waits grow to max at the most, e.g.
// zmtp.MaxRedial(endpoints).
func New(max time.Duration) *Backoff {
	return &Backoff{max: max, next: min(first, max)}
}

// Next is the wait after a failed attempt; the wait after a further
// failure is twice as long, up to the cap.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}

// Delay is the wait Next would return now, without counting a failure:
// the pause before redialing a broker that said goodbye, say.
func (b *Backoff) Delay() time.Duration { return b.next }

// Reset starts again from the first wait, after an attempt that worked.
func (b *Backoff) Reset() { b.next = min(first, b.max) }

// Wait waits d and reports true, or false if done is closed first (a
// stop channel, or a context's Done()).
func Wait(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
