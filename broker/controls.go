package broker

import (
	"fmt"
	"time"

	"github.com/eventmq/emq/store"
)

// An operator's controls of a queue (store.QueueSettings): pause, a limit
// of jobs in flight across every worker, a rate of dispatches with a
// burst. They are kept in the journal; Options.Queues gives defaults for
// queues that have none stored. The loop owns them, as it owns the rest:
//
//	controls      what applies, by queue name: stored, else the default
//	controlsNext  what was written and is not yet durable (the latest
//	              per queue, with its writes under way), so that changes
//	              made meanwhile build on it
//	queue.set     the controls of a live queue, copied from controls
//
// A change applies once the journal has it: a pause takes effect when
// stored, and a paused queue still takes and stores jobs. Dispatch asks
// canDispatch before each job; the rate's bucket is topped up then, and
// when it is empty the queue's refill alarm wakes the loop when the next
// token is due.

// pendingControls are a queue's controls as last written, and how many
// writes of them are under way.
type pendingControls struct {
	next   store.QueueSettings
	writes int
}

// QueueChange changes some of a queue's controls; nil fields stay as
// they are.
type QueueChange struct {
	Paused      *bool    `json:"paused,omitempty"`
	Concurrency *int     `json:"concurrency,omitempty"`
	Rate        *float64 `json:"rate,omitempty"`
	Burst       *int     `json:"burst,omitempty"`

	// Defaults for each tenant of the queue (fair.go).
	TenantConcurrency *int     `json:"tenant_concurrency,omitempty"`
	TenantRate        *float64 `json:"tenant_rate,omitempty"`
	TenantBurst       *int     `json:"tenant_burst,omitempty"`
}

// Apply returns s with c's fields.
func (c QueueChange) Apply(s store.QueueSettings) store.QueueSettings {
	if c.Paused != nil {
		s.Paused = *c.Paused
	}
	if c.Concurrency != nil {
		s.Concurrency = *c.Concurrency
	}
	if c.Rate != nil {
		s.Rate = *c.Rate
	}
	if c.Burst != nil {
		s.Burst = *c.Burst
	}
	if c.TenantConcurrency != nil {
		s.TenantConcurrency = *c.TenantConcurrency
	}
	if c.TenantRate != nil {
		s.TenantRate = *c.TenantRate
	}
	if c.TenantBurst != nil {
		s.TenantBurst = *c.TenantBurst
	}
	return s
}

// changeQueue applies c to the queue's latest controls and writes them;
// reply gets them once the journal has them, or the refusal.
func (b *Broker) changeQueue(name string, c QueueChange, reply func(store.QueueSettings, error)) {
	p, ok := b.controlsNext[name]
	if !ok {
		p.next = b.controls[name]
	}
	next := c.Apply(p.next)
	if err := next.Validate(); err != nil {
		reply(store.QueueSettings{}, err)
		return
	}
	b.controlsNext[name] = pendingControls{next, p.writes + 1}
	b.journal.PutQueueSettings(name, next, func(err error) {
		if p := b.controlsNext[name]; p.writes > 1 {
			b.controlsNext[name] = pendingControls{p.next, p.writes - 1}
		} else {
			delete(b.controlsNext, name)
		}
		if err != nil {
			b.noticeFence(err)
			reply(store.QueueSettings{}, err)
			return
		}
		b.applyControls(name, next)
		reply(next, nil)
	})
}

// loadControls reads the stored controls over the configured defaults.
func (b *Broker) loadControls() error {
	stored, err := b.journal.QueueSettings()
	if err != nil {
		return fmt.Errorf("reading the journal's queue controls: %w", err)
	}
	for name, s := range b.opts.Queues {
		b.controls[name] = s
	}
	for name, s := range stored {
		b.controls[name] = s
	}
	return nil
}

// applyControls makes s the controls of queue name, and dispatches what
// they now allow.
func (b *Broker) applyControls(name string, s store.QueueSettings) {
	b.controls[name] = s
	b.emit(Event{Kind: EventQueueControls, Queue: name, Controls: &s})
	q := b.queues[name]
	if q == nil {
		return
	}
	q.set = s
	q.rate.tokens = min(q.rate.tokens, burst(s))
	b.retenant(q)
	b.fill(q)
}

// newQueue makes a live queue with its controls.
func (b *Broker) newQueue(name string) *queue {
	q := &queue{name: name, set: b.controls[name]}
	q.rate = bucket{tokens: burst(q.set), filled: b.at(time.Now())}
	q.refill.fire = func(time.Time) { b.fill(q) }
	return q
}

// burst is how many tokens the rate's bucket holds.
func burst(s store.QueueSettings) float64 { return float64(max(1, s.Burst)) }

// canDispatch reports whether q's controls let one more of its jobs go
// now. A queue held back by its rate gets its refill alarm set.
func (b *Broker) canDispatch(q *queue) bool {
	s := &q.set
	if s.Paused || s.Concurrency > 0 && q.running >= s.Concurrency || b.routes.Load().held(q.name) {
		return false
	}
	if s.Rate <= 0 {
		return true
	}
	t := time.Now()
	ok, wait := q.rate.ready(s.Rate, s.Burst, b.at(t))
	if !ok {
		b.timers.set(&q.refill, b.after(t, wait))
	}
	return ok
}

// bucket is a rate as a token bucket: it fills at rate tokens a second up
// to the burst (at least 1), and each dispatch takes one.
type bucket struct {
	tokens float64
	filled int64 // when tokens was last topped up, on the deadlines' clock (Broker.at)
}

// ready tops the bucket up to now and reports whether it holds a token;
// if not, wait is how long until it does.
func (k *bucket) ready(rate float64, burst int, now int64) (ok bool, wait time.Duration) {
	k.tokens = min(float64(max(1, burst)), k.tokens+rate*float64(now-k.filled)/float64(time.Second))
	k.filled = now
	if k.tokens >= 1 {
		return true, 0
	}
	return false, time.Duration((1-k.tokens)/rate*float64(time.Second)) + 1 // Validate keeps rate where this fits
}

// untilFull tops the bucket up to now and says how long until it is full.
func (k *bucket) untilFull(rate float64, burst int, now int64) time.Duration {
	k.ready(rate, burst, now)
	if missing := float64(max(1, burst)) - k.tokens; missing > 0 {
		return time.Duration(missing/rate*float64(time.Second)) + 1
	}
	return 0
}

// dispatched counts a job of q given to a worker against its controls.
func (q *queue) dispatched() {
	q.running++
	if q.set.Rate > 0 {
		q.rate.tokens--
	}
}

// fillFreed offers the jobs that freed capacity lets go.
func (b *Broker) fillFreed() {
	for len(b.toFill) > 0 {
		q := b.toFill[0]
		b.toFill = b.toFill[1:]
		q.filling = false
		if b.queues[q.name] == q {
			b.fill(q)
		}
	}
	b.toFill = nil
}
