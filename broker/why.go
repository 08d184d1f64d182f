package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/eventmq/emq/store"
)

// Why a job waits: one reason for every state a job can be in, found in
// the order dispatch would meet it.

// Reasons a job is where it is (Why.Reason).
const (
	WhyStoring           = "storing"            // its write is under way: not ACKed yet
	WhyDelayed           = "delayed"            // until Until (delay header or retry backoff)
	WhyWaitingParents    = "waiting_parents"    // for the jobs in Parents to be done
	WhyWaitingBatch      = "waiting_batch"      // for batch Batch to be complete
	WhyOtherShard        = "other_shard"        // its queue is being moved between shards
	WhyQueuePaused       = "queue_paused"       // an operator paused its queue
	WhyLimiterFull       = "limiter_full"       // named limiter Limiter has no room (Until: its next token)
	WhyTenantConcurrency = "tenant_concurrency" // its tenant holds its concurrency (Holding)
	WhyTenantRate        = "tenant_rate"        // its tenant's rate: next room at Until
	WhyQueueConcurrency  = "queue_concurrency"  // its queue holds its concurrency
	WhyQueueRate         = "queue_rate"         // its queue's rate: next room at Until
	WhyNoWorker          = "no_worker"          // no worker serves its queue
	WhyWorkersBusy       = "workers_busy"       // every slot of its queue's workers is busy
	WhyBehind            = "behind"             // other jobs go first (Ahead)
	WhyInFlight          = "in_flight"          // a worker holds it
	WhyDone              = "done"               // done, its result kept
	WhyDead              = "dead"               // out of attempts, in the dead letters
	WhyCancelled         = "cancelled"          // cancelled
)

// Why says why a job is where it is: one sentence and its parts.
type Why struct {
	MsgID    string    `json:"msgid"`
	Queue    string    `json:"queue"`
	Tenant   string    `json:"tenant,omitempty"`
	State    string    `json:"state"`
	Reason   string    `json:"reason"`
	Sentence string    `json:"sentence"`
	Until    time.Time `json:"until,omitzero"` // delayed until, or the next room
	Since    time.Time `json:"since,omitzero"` // in flight since, done or dead since

	Worker   string    `json:"worker,omitempty"` // holding it
	Attempt  int       `json:"attempt,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"` // its timeout, in flight
	Overdue  bool      `json:"overdue,omitempty"` // in flight past its deadline and the grace

	Limiter string       `json:"limiter,omitempty"`
	Holding []string     `json:"holding,omitempty"` // jobs holding its tenant's concurrency (at most 10)
	Parents []ParentWhy  `json:"parents,omitempty"` // what it waits for (at most 20)
	Batch   string       `json:"batch,omitempty"`
	Ahead   *AheadCounts `json:"ahead,omitempty"`

	LastWorker time.Time `json:"last_worker,omitzero"` // no worker: when one last served the queue
	Error      string    `json:"error,omitempty"`      // dead: the last attempt's reason
}

// ParentWhy is one job a waiting job waits for, with its state.
type ParentWhy struct {
	MsgID string `json:"msgid"`
	State string `json:"state"`
}

// AheadCounts are the jobs that go before a pending one.
type AheadCounts struct {
	Priority int `json:"priority"` // of a lower priority value
	Tenant   int `json:"tenant"`   // of its own tenant, before it
	Turns    int `json:"turns"`    // of other tenants, in their turns before it
}

// maxLastServed bounds the queues whose last worker's leaving is kept
// (Why's LastWorker).
const maxLastServed = 10_000

// maxShown bounds the jobs a Why names.
const (
	maxHolding = 10
	maxParents = 20
)

// Why says why the job msgid is where it is. An unknown msgid is
// store.ErrNotFound, naming it.
func (b *Broker) Why(ctx context.Context, msgid string) (Why, error) {
	type live struct {
		w  Why
		ok bool
	}
	l, err := query(ctx, b, func() live {
		j := b.jobs.get(msgid)
		if j == nil {
			return live{}
		}
		return live{b.why(j, time.Now()), true}
	})
	if err != nil || l.ok {
		return l.w, err
	}
	sj, err := b.journal.Get(msgid)
	if errors.Is(err, store.ErrNotFound) {
		return Why{}, fmt.Errorf("job %q: %w (not held, not stored: never sent, or done and not kept)", msgid, store.ErrNotFound)
	}
	if err != nil {
		return Why{}, err
	}
	return b.storedWhy(sj), nil
}

// storedWhy says why a job the loop does not hold is where it is.
func (b *Broker) storedWhy(sj *store.Job) Why {
	w := Why{MsgID: sj.MsgID, Queue: sj.Queue, State: sj.State.String(), Batch: sj.Batch}
	switch sj.State {
	case store.Waiting:
		w.Reason = WhyWaitingParents
		var waiting []string
		for _, id := range sj.After {
			state := "done"
			if pj, err := b.journal.Get(id); err == nil {
				state = pj.State.String()
			} else if !errors.Is(err, store.ErrNotFound) {
				state = "unknown (" + err.Error() + ")"
			}
			if state != "done" {
				waiting = append(waiting, id)
			}
			if len(w.Parents) < maxParents {
				w.Parents = append(w.Parents, ParentWhy{id, state})
			}
		}
		switch {
		case len(waiting) > 0:
			w.Sentence = fmt.Sprintf("It waits for %d of the %d jobs it runs after to be done: %s.", len(waiting), len(sj.After), shortList(waiting, 5))
		case sj.AfterBatch != "":
			w.Reason, w.Batch = WhyWaitingBatch, sj.AfterBatch
			w.Sentence = fmt.Sprintf("It waits for batch %q to be complete.", sj.AfterBatch)
		default:
			w.Sentence = "What it waited for is done; it is being released."
		}
	case store.Done:
		w.Reason, w.Since = WhyDone, sj.Finished
		w.Sentence = fmt.Sprintf("It is done (at %s); its result is kept.", stamp(sj.Finished))
	case store.Dead:
		w.Reason, w.Error = WhyDead, sj.LastError
		w.Sentence = fmt.Sprintf("It is dead after %d attempts: %s. emq dlq retry runs it again.", sj.Attempts, sj.LastError)
	case store.Cancelled:
		w.Reason, w.Since = WhyCancelled, sj.Finished
		why := ""
		if n := len(sj.Trail); n > 0 && sj.Trail[n-1].Reason != "" {
			why = ": " + sj.Trail[n-1].Reason
		}
		w.Sentence = fmt.Sprintf("It was cancelled (at %s)%s.", stamp(sj.Finished), why)
	default: // pending in the journal, not yet in memory (a broker starting)
		w.Reason = WhyStoring
		w.Sentence = "It is stored and not yet held by the broker (it is starting or taking the queue over)."
	}
	return w
}

// why says why j, held by the loop, is where it is.
func (b *Broker) why(j *job, now time.Time) Why {
	q := j.q
	w := Why{MsgID: j.id, Queue: q.name, Attempt: int(j.attempts) + 1}
	if j.ten != nil {
		w.Tenant = j.ten.name
	}
	switch j.state {
	case journaling:
		w.State, w.Reason = "journaling", WhyStoring
		w.Sentence = "Its write to the journal is under way; it is ACKed once durable."
		return w
	case delayed:
		w.State, w.Reason, w.Until = "delayed", WhyDelayed, fromNanos(j.notBefore)
		if j.attempts > 0 {
			w.Sentence = fmt.Sprintf("It waits for its retry backoff after %d attempts, until %s.", j.attempts, stamp(w.Until))
		} else {
			w.Sentence = fmt.Sprintf("It is delayed until %s.", stamp(w.Until))
		}
		return w
	case inFlight:
		w.State, w.Reason = "in_flight", WhyInFlight
		w.Worker = printableID(j.holder.key.id)
		for _, e := range b.trails[j] {
			if e.Kind == EventDispatched {
				w.Since = e.Time
			}
		}
		if j.timeout > 0 && !w.Since.IsZero() {
			w.Deadline = w.Since.Add(j.timeout)
		}
		w.Overdue = j.overdue
		w.Sentence = fmt.Sprintf("Worker %s holds it (attempt %d)", w.Worker, w.Attempt)
		if !w.Since.IsZero() {
			w.Sentence += " since " + stamp(w.Since)
		}
		if !w.Deadline.IsZero() {
			w.Sentence += ", its deadline " + stamp(w.Deadline)
		}
		if w.Overdue {
			w.Sentence += "; it is overdue"
		}
		w.Sentence += "."
		return w
	}
	w.State = "pending"
	var c clock
	c.t = now
	switch {
	case b.routes.Load().held(q.name):
		w.Reason = WhyOtherShard
		w.Sentence = fmt.Sprintf("Queue %q is being moved between shards; it runs once the move is done.", q.name)
	case q.set.Paused:
		w.Reason = WhyQueuePaused
		w.Sentence = fmt.Sprintf("Queue %q is paused (emq queues resume %s).", q.name, q.name)
	case j.parkedOn() != nil:
		lm := j.parkedOn()
		w.Reason, w.Limiter = WhyLimiterFull, lm.name
		if lm.lim.concurrency > 0 && lm.running >= lm.lim.concurrency {
			w.Sentence = fmt.Sprintf("Limiter %q is full: %d of %d jobs naming it run; %d wait in its line.", lm.name, lm.running, lm.lim.concurrency, lm.line.len()-lm.stale)
		} else {
			w.Until = b.nextToken(&lm.refill, now)
			w.Sentence = fmt.Sprintf("Limiter %q is at its rate of %g a second; next room at %s.", lm.name, lm.lim.rate, stamp(w.Until))
		}
	case j.ten != nil && j.ten.lim.concurrency > 0 && j.ten.running >= j.ten.lim.concurrency:
		t := j.ten
		w.Reason = WhyTenantConcurrency
		w.Holding = b.holdingTenant(t)
		w.Sentence = fmt.Sprintf("Tenant %q is at its concurrency: %d of %d jobs run (%s).", t.name, t.running, t.lim.concurrency, shortList(w.Holding, 3))
	case j.ten != nil && b.rateHeld(j.ten, &c):
		t := j.ten
		w.Reason, w.Until = WhyTenantRate, b.nextToken(&t.refill, now)
		w.Sentence = fmt.Sprintf("Tenant %q is at its rate of %g a second; next room at %s.", t.name, t.lim.rate, stamp(w.Until))
	case q.set.Concurrency > 0 && q.running >= q.set.Concurrency:
		w.Reason = WhyQueueConcurrency
		w.Sentence = fmt.Sprintf("Queue %q is at its concurrency: %d of %d jobs run.", q.name, q.running, q.set.Concurrency)
	case q.set.Rate > 0 && q.rate.tokens < 1:
		w.Reason, w.Until = WhyQueueRate, b.nextToken(&q.refill, now)
		w.Sentence = fmt.Sprintf("Queue %q is at its rate of %g a second; next room at %s.", q.name, q.set.Rate, stamp(w.Until))
	case len(q.workers) == 0:
		w.Reason = WhyNoWorker
		w.LastWorker = b.lastServed[q.name]
		w.Sentence = fmt.Sprintf("No worker serves queue %q", q.name)
		if !w.LastWorker.IsZero() {
			w.Sentence += fmt.Sprintf(" (the last one left %s ago)", now.Sub(w.LastWorker).Round(time.Second))
		}
		w.Sentence += "."
	case !anyFree(q):
		w.Reason = WhyWorkersBusy
		a := q.jobs.ahead(j)
		w.Ahead = &a
		w.Sentence = fmt.Sprintf("Every slot of the %d workers of queue %q is busy; %s.", len(q.workers), q.name, a)
	default: // a moment's state: it goes out at the end of this turn
		w.Reason = WhyBehind
		a := q.jobs.ahead(j)
		w.Ahead = &a
		w.Sentence = fmt.Sprintf("It is about to be dispatched; %s.", a)
	}
	return w
}

// rateHeld reports whether t is held back by its rate now.
func (b *Broker) rateHeld(t *tenant, c *clock) bool {
	if t.lim.rate <= 0 {
		return false
	}
	ok, _ := t.rate.ready(t.lim.rate, t.lim.burst, b.at(c.now()))
	return !ok
}

// nextToken is when a rate's refill alarm is due, or now when none is set.
func (b *Broker) nextToken(a *alarm, now time.Time) time.Time {
	if a.due.slot == 0 {
		return now
	}
	return now.Add(time.Duration(a.due.at - b.at(now)))
}

// holdingTenant returns up to maxHolding msgids of t's jobs held by workers.
func (b *Broker) holdingTenant(t *tenant) []string {
	var out []string
	for _, w := range t.q.workers {
		for id, j := range w.held {
			if j.ten == t && len(out) < maxHolding {
				out = append(out, id)
			}
		}
	}
	return out
}

func anyFree(q *queue) bool {
	for _, w := range q.workers {
		if w.free > 0 {
			return true
		}
	}
	return false
}

// ahead counts the jobs that go before j, pending in this queue: those of
// lower priority values, those of its tenant before it, and those other
// tenants get in their turns meanwhile (each at most its weight a turn
// for each turn j's tenant waits). It looks at every lane of j's level:
// for an operator's question, not for dispatch.
func (q *jobQueue) ahead(j *job) AheadCounts {
	var a AheadCounts
	for _, l := range q.heap {
		if l.prio < j.prio {
			for i := range l.ring.len() {
				if ln := l.ring.at(i); !ln.dead {
					a.Priority += ln.live()
				}
			}
		}
	}
	var own *lane
	for _, ln := range j.ten.lanes {
		if ln.l.prio == j.prio {
			own = ln
		}
	}
	if own == nil {
		return a
	}
	for i := range own.jobs.len() {
		x := own.jobs.at(i)
		if x == j {
			break
		}
		if x.state == pending {
			a.Tenant++
		}
	}
	turns := a.Tenant/max(1, j.ten.weight) + 1
	l := own.l
	for i := range l.ring.len() {
		if ln := l.ring.at(i); !ln.dead && ln != own {
			a.Turns += min(ln.live(), turns*ln.t.weight)
		}
	}
	return a
}

func (a AheadCounts) String() string {
	return fmt.Sprintf("before it: %d jobs of a higher priority, %d of its tenant, about %d of other tenants' turns", a.Priority, a.Tenant, a.Turns)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func shortList(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:n], ", ") + fmt.Sprintf(" and %d more", len(ids)-n)
}
