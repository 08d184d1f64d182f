package broker

import (
	"fmt"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Named limiters (header limit:NAME[;NAME...]): a concurrency and a rate
// shared by every job that names the limiter, whichever queue it is in.
// They are kept in the journal (store.LimiterSettings) and held here by
// name; with shards, each shard has its own.
//
// A job whose limiter has no room when it comes up is parked in that
// limiter's line, FIFO, and its tenant's next job is looked at: the
// limiter holds back only the jobs that name it. When the limiter has
// room again (a job naming it is released, its rate's next token, its
// settings changed or it was removed), the first in its line, as many as
// it has room for, go back to the head of their lanes and their queues
// are filled. A job counts against each limiter it names while a worker
// holds it (jobLimits.held), so that a limiter changed or removed
// meanwhile is given back what it was given.
type limiter struct {
	name    string
	lim     limits
	running int
	rate    bucket
	refill  alarm
	line    deque[*job] // jobs parked until it has room
	stale   int         // jobs in line taken out (removed, cancelled, unparked)
}

// jobLimits are the limiters a job names, those it counts against while
// held, and the one it waits for.
type jobLimits struct {
	names  []string
	held   []*limiter
	parked *limiter // pending, in this limiter's line
}

// parkedOn returns the limiter in whose line j waits, or nil.
func (j *job) parkedOn() *limiter {
	if j.lim == nil {
		return nil
	}
	return j.lim.parked
}

// limitsOf turns store settings into limits.
func limiterLimits(s store.LimiterSettings) limits {
	return limits{s.Concurrency, s.Rate, s.Burst}
}

// loadLimiters reads the stored limiters and tenants' settings.
func (b *Broker) loadLimiters() error {
	stored, err := b.journal.Limiters()
	if err != nil {
		return fmt.Errorf("reading the journal's limiters: %w", err)
	}
	for name, s := range stored {
		b.applyLimiter(name, s)
	}
	tenants, err := b.journal.TenantSettings()
	if err != nil {
		return fmt.Errorf("reading the journal's tenant settings: %w", err)
	}
	b.tenantSet = tenants
	return nil
}

// applyLimiter makes s the settings of limiter name, made if new, and
// lets go what they now allow.
func (b *Broker) applyLimiter(name string, s store.LimiterSettings) {
	lm := b.limiters[name]
	if lm == nil {
		lm = &limiter{name: name}
		lm.refill.fire = func(time.Time) { b.unparkRoom(lm) }
		b.limiters[name] = lm
		lm.lim = limiterLimits(s)
		lm.rate = bucket{tokens: float64(max(1, s.Burst)), filled: b.at(time.Now())}
		return
	}
	lm.lim = limiterLimits(s)
	lm.rate.tokens = min(lm.rate.tokens, float64(max(1, s.Burst)))
	b.unparkRoom(lm)
}

// dropLimiter forgets a removed limiter: the jobs in its line go back to
// their lanes, and nothing it held counts anywhere now.
func (b *Broker) dropLimiter(name string) {
	lm := b.limiters[name]
	if lm == nil {
		return
	}
	delete(b.limiters, name)
	b.timers.stop(&lm.refill)
	b.unpark(lm, lm.line.len())
}

// fullLimiter returns the first limiter j names that has no room now, or
// nil. A limiter held back by its rate has its refill alarm set.
func (b *Broker) fullLimiter(j *job, c *clock) *limiter {
	if j.lim == nil {
		return nil
	}
	for _, name := range j.lim.names {
		lm := b.limiters[name]
		if lm == nil { // removed since the job came: it limits nothing now
			continue
		}
		ok, wait := b.room(lm.lim, lm.running, &lm.rate, c)
		if !ok {
			if wait > 0 {
				b.timers.set(&lm.refill, b.after(c.now(), wait))
			}
			return lm
		}
	}
	return nil
}

// park puts j, taken from its lane, in lm's line.
func (b *Broker) park(j *job, lm *limiter) {
	j.lim.parked = lm
	lm.line.pushBack(j)
}

// useLimiters counts j, given to a worker, against its limiters.
func (b *Broker) useLimiters(j *job) {
	if j.lim == nil {
		return
	}
	for _, name := range j.lim.names {
		if lm := b.limiters[name]; lm != nil {
			lm.running++
			if lm.lim.rate > 0 {
				lm.rate.tokens--
			}
			j.lim.held = append(j.lim.held, lm)
		}
	}
}

// freeLimiters gives back what j, no longer held, counted against.
func (b *Broker) freeLimiters(j *job) {
	if j.lim == nil {
		return
	}
	for i, lm := range j.lim.held {
		lm.running--
		j.lim.held[i] = nil
		if b.limiters[lm.name] == lm {
			b.unparkRoom(lm)
		}
	}
	j.lim.held = j.lim.held[:0]
}

// unparkRoom lets go as many of lm's line as it has room for now.
func (b *Broker) unparkRoom(lm *limiter) {
	if lm.line.len() == lm.stale {
		return
	}
	n := lm.line.len()
	if lm.lim.concurrency > 0 {
		n = min(n, lm.lim.concurrency-lm.running)
	}
	if lm.lim.rate > 0 {
		var c clock
		if ok, wait := lm.rate.ready(lm.lim.rate, lm.lim.burst, b.at(c.now())); !ok {
			b.timers.set(&lm.refill, b.after(c.now(), wait))
			return
		}
		n = min(n, int(lm.rate.tokens))
	}
	b.unpark(lm, n)
}

// unpark puts back the first n jobs of lm's line at the head of their
// lanes, keeping their order, and has their queues filled.
func (b *Broker) unpark(lm *limiter, n int) {
	var back []*job
	for len(back) < n && lm.line.len() > 0 {
		j := lm.line.popFront()
		if j.state != pending || j.lim.parked != lm {
			lm.stale--
			continue
		}
		j.lim.parked = nil
		back = append(back, j)
	}
	if lm.line.len() == 0 {
		lm.line.clear()
		lm.stale = 0
	}
	for i := len(back) - 1; i >= 0; i-- { // to the head, the last first
		j := back[i]
		j.q.jobs.unpark(j)
		b.fillLater(j.q)
	}
}

// undefinedLimiter returns the first limiter j names that is not
// defined, or "": a typo must not lift a limit.
func (b *Broker) undefinedLimiter(j *job) string {
	if j.lim == nil {
		return ""
	}
	for _, name := range j.lim.names {
		if b.limiters[name] == nil {
			return name
		}
	}
	return ""
}

// undefinedLimiterText is the text of the ERROR bad_request for a job
// naming a limiter that is not defined.
func undefinedLimiterText(name string) string {
	return fmt.Sprintf("header %s: no limiter is named %s (emq limiters set makes one)", emqp.HeaderLimit, emqp.QuoteName(name))
}
