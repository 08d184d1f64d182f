package broker

import (
	"time"
)

// Fair shares (DESIGN.md, "Flow control"). A queue's pending jobs are
// ordered by priority first; among the jobs of one priority, by tenant
// (header tenant:, "" without it) in weighted turn; FIFO within a
// tenant:
//
//	jobQueue ─ heap of levels (one per priority with a lane in turn)
//	level    ─ ring of lanes: the tenants with jobs of this priority
//	lane     ─ one tenant's jobs of one priority, FIFO
//
// Taking a job (take) looks at the lane at the front of the lowest
// level's ring. A lane's turn gives up to its tenant's weight of jobs
// (deficit round robin with a cost of one a job), then it goes to the
// back of the ring. A tenant without room (its concurrency or its rate)
// has its lanes taken out of their rings as they come up, kept in
// tenant.held, and put back when it has room again; a level whose ring is
// empty leaves the heap, so the levels below it go on. A job whose named
// limiter has no room waits in that limiter's line (limiters.go) and
// goes back to the head of its lane when the limiter has room. Each step
// is O(1), plus O(log p) when a level enters or leaves the heap (p:
// priorities in use), whatever the number of tenants: a lane is taken
// out at most once for each time its tenant runs out of room.
//
// A job taken out of the middle (an admin's remove, a cancel) is marked
// by its state and skipped when it comes up; a lane is dropped when it
// has no job left, a tenant when no job of it is held anywhere (and its
// rate's bucket is full again).

// tenant is one tenant of one queue.
type tenant struct {
	name    string
	q       *queue
	lanes   []*lane // its lanes, one per priority it has jobs of
	held    []*lane // lanes out of their rings while it has no room
	blocked bool    // out of room: new lanes go to held
	refs    int     // its jobs held in memory, in any state
	pending int     // its pending jobs, parked ones too
	running int     // its jobs held by workers

	lim    limits // its limits: its own settings over the queue's defaults
	weight int
	rate   bucket
	refill alarm // its rate's next token, or its bucket full again (then dropped if idle)
}

// limits are a concurrency and a rate with its burst; zero is no limit.
type limits struct {
	concurrency int
	rate        float64
	burst       int
}

// room reports whether one more job may go under l, with running held and
// the bucket k; when the rate holds it back, wait says for how long.
func (b *Broker) room(l limits, running int, k *bucket, c *clock) (ok bool, wait time.Duration) {
	if l.concurrency > 0 && running >= l.concurrency {
		return false, 0
	}
	if l.rate <= 0 {
		return true, 0
	}
	return k.ready(l.rate, l.burst, b.at(c.now()))
}

// lane is one tenant's pending jobs of one priority.
type lane struct {
	t      *tenant
	l      *level
	jobs   deque[*job]
	stale  int       // jobs taken out, still in jobs
	credit int       // jobs left in its turn
	where  laneWhere // in its level's ring, in its tenant's held lanes, or neither
	dead   bool      // dropped while in a ring or held: skipped there
}

type laneWhere uint8

const (
	nowhere laneWhere = iota
	inRing
	inHeld
)

// live reports the lane's jobs that were not taken out.
func (ln *lane) live() int { return ln.jobs.len() - ln.stale }

// skipStale drops the jobs taken out that are at the head.
func (ln *lane) skipStale() {
	for ln.stale > 0 && ln.jobs.len() > 0 && ln.jobs.front().state != pending {
		ln.jobs.popFront()
		ln.stale--
	}
}

// compact drops every job taken out.
func (ln *lane) compact() {
	var kept deque[*job]
	for i := range ln.jobs.len() {
		if j := ln.jobs.at(i); j.state == pending {
			kept.pushBack(j)
		}
	}
	ln.jobs, ln.stale = kept, 0
}

// tenant returns q's tenant of that name, made if it is not held.
func (b *Broker) tenant(q *queue, name string) *tenant {
	t := q.tenants[name]
	if t == nil {
		if q.tenants == nil {
			q.tenants = make(map[string]*tenant)
		}
		t = &tenant{name: name, q: q}
		b.setLimits(t)
		t.rate = bucket{tokens: float64(max(1, t.lim.burst)), filled: b.at(time.Now())}
		t.refill.fire = func(time.Time) { b.tenantRefilled(t) }
		q.tenants[name] = t
	}
	return t
}

// setLimits works out t's limits and weight from its own settings and
// its queue's defaults.
func (b *Broker) setLimits(t *tenant) {
	s := t.q.set
	t.lim = limits{s.TenantConcurrency, s.TenantRate, s.TenantBurst}
	own := b.tenantSet[t.q.name][t.name]
	if own.Concurrency != nil {
		t.lim.concurrency = *own.Concurrency
	}
	if own.Rate != nil {
		t.lim.rate = *own.Rate
	}
	if own.Burst != nil {
		t.lim.burst = *own.Burst
	}
	t.weight = max(1, own.Weight)
	t.rate.tokens = min(t.rate.tokens, float64(max(1, t.lim.burst)))
}

// adopt counts j as one of its queue's live jobs and its tenant's.
func (b *Broker) adopt(j *job) {
	j.q.live++
	name, _ := j.headers.Tenant() // checked when it came in; stored bad, it is ""'s
	j.ten = b.tenant(j.q, name)
	j.ten.refs++
}

// disown undoes adopt: j is no longer held.
func (b *Broker) disown(j *job) {
	j.q.live--
	if t := j.ten; t != nil {
		t.refs--
		b.dropIfIdle(t)
	}
}

// dropIfIdle forgets a tenant none of whose jobs is held, once its rate's
// bucket is full again (dropped earlier, it would come back with a full
// one and go over its rate).
func (b *Broker) dropIfIdle(t *tenant) {
	if t.refs > 0 || t.q.tenants[t.name] != t {
		return
	}
	if t.lim.rate > 0 {
		now := time.Now()
		if full := t.rate.untilFull(t.lim.rate, t.lim.burst, b.at(now)); full > 0 {
			b.timers.set(&t.refill, b.after(now, full))
			return
		}
	}
	b.timers.stop(&t.refill)
	delete(t.q.tenants, t.name)
}

// tenantRefilled: t's rate has a token again (it may go on), or its
// bucket is full (it may be forgotten).
func (b *Broker) tenantRefilled(t *tenant) {
	if t.q.tenants[t.name] != t {
		return
	}
	if t.refs == 0 {
		b.dropIfIdle(t)
		return
	}
	b.unblock(t)
}

// tenantRoom reports whether t may have one more job go now; if not, it
// is blocked and wakes when it has room (its rate's alarm, or release).
func (b *Broker) tenantRoom(t *tenant, c *clock) bool {
	ok, wait := b.room(t.lim, t.running, &t.rate, c)
	if !ok {
		t.blocked = true
		if wait > 0 {
			b.timers.set(&t.refill, b.after(c.now(), wait))
		}
	}
	return ok
}

// unblock puts a blocked tenant's lanes back in their rings and has its
// queue filled at the end of the turn.
func (b *Broker) unblock(t *tenant) {
	if !t.blocked {
		return
	}
	t.blocked = false
	for _, ln := range t.held {
		ln.where = nowhere
		if !ln.dead {
			t.q.jobs.enter(ln, false)
		}
	}
	clear(t.held)
	t.held = t.held[:0]
	b.fillLater(t.q)
}

// lane returns t's lane of priority prio, made if it has none.
func (q *jobQueue) lane(t *tenant, prio uint16) *lane {
	for _, ln := range t.lanes {
		if ln.l.prio == prio {
			return ln
		}
	}
	l := q.level(prio)
	ln := &lane{t: t, l: l}
	t.lanes = append(t.lanes, ln)
	l.lanes++
	return ln
}

// enter puts ln in its level's ring (at the front when first), or in its
// tenant's held lanes while the tenant is blocked.
func (q *jobQueue) enter(ln *lane, first bool) {
	if ln.where != nowhere {
		return
	}
	ln.credit = 0
	if ln.t.blocked {
		ln.where = inHeld
		ln.t.held = append(ln.t.held, ln)
		return
	}
	ln.where = inRing
	l := ln.l
	if first {
		l.ring.pushFront(ln)
	} else {
		l.ring.pushBack(ln)
	}
	if l.at < 0 {
		q.push(l)
	}
}

// dropLane forgets a lane with no job left. One in a ring is skipped when
// it comes up; one held, when its tenant has room again.
func (q *jobQueue) dropLane(ln *lane) {
	t := ln.t
	for i, x := range t.lanes {
		if x == ln {
			t.lanes[i] = t.lanes[len(t.lanes)-1]
			t.lanes[len(t.lanes)-1] = nil
			t.lanes = t.lanes[:len(t.lanes)-1]
			break
		}
	}
	ln.dead = true
	ln.jobs.clear()
	ln.stale = 0
	ln.l.lanes--
	if ln.where == inRing {
		ln.l.dead++
	}
}

// pushBack queues j at the tail of its tenant's jobs of its priority.
func (q *jobQueue) pushBack(j *job) {
	ln := q.lane(j.ten, j.prio)
	ln.jobs.pushBack(j)
	q.enter(ln, false)
	q.size++
	j.ten.pending++
}

// pushFront puts j at the head of its tenant's jobs of its priority, and
// that tenant first in turn if it was not in turn.
func (q *jobQueue) pushFront(j *job) {
	q.unpark(j)
	q.size++
	j.ten.pending++
}

// unpark puts j, counted pending already, back at the head of its lane.
func (q *jobQueue) unpark(j *job) {
	ln := q.lane(j.ten, j.prio)
	ln.jobs.pushFront(j)
	q.enter(ln, true)
}

// remove takes out j, a pending job of this queue (in a lane, or parked
// in a limiter's line), before its state changes: it is skipped when it
// comes up.
func (q *jobQueue) remove(j *job) {
	q.size--
	j.ten.pending--
	if lm := j.parkedOn(); lm != nil {
		lm.stale++
		j.state = removed
		return
	}
	j.state = removed
	for _, ln := range j.ten.lanes {
		if ln.l.prio != j.prio {
			continue
		}
		ln.stale++
		switch {
		case ln.live() == 0:
			q.dropLane(ln)
		case ln.stale > 64 && ln.stale > ln.jobs.len()/2:
			ln.compact()
		}
		return
	}
}

// take returns q's next job that its tenant and limiters let go now,
// taken out of its queue, or nil. The queue's own controls are the
// caller's (canDispatch).
func (b *Broker) take(q *queue) *job {
	jq := &q.jobs
	var now clock
	for len(jq.heap) > 0 {
		l := jq.heap[0]
		ln := l.ring.front()
		if ln.dead {
			l.ring.popFront()
			ln.where = nowhere
			l.dead--
			jq.settle(l)
			continue
		}
		ln.skipStale()
		if !b.tenantRoom(ln.t, &now) {
			l.ring.popFront()
			ln.credit, ln.where = 0, inHeld
			ln.t.held = append(ln.t.held, ln)
			b.stats.PassedOver.Add(1)
			jq.settle(l)
			continue
		}
		j := ln.jobs.popFront()
		lm := b.fullLimiter(j, &now)
		if lm != nil {
			b.park(j, lm)
			b.stats.PassedOver.Add(1)
		} else {
			jq.size--
			ln.t.pending--
			if ln.credit == 0 {
				ln.credit = ln.t.weight
			}
			ln.credit--
		}
		if ln.skipStale(); ln.jobs.len() == 0 {
			l.ring.popFront()
			ln.where = nowhere
			jq.dropLane(ln)
			jq.settle(l)
		} else if lm == nil && ln.credit == 0 {
			l.ring.popFront()
			l.ring.pushBack(ln)
		}
		if lm == nil {
			return j
		}
	}
	return nil
}

// clock reads the time once, when first asked.
type clock struct{ t time.Time }

func (c *clock) now() time.Time {
	if c.t.IsZero() {
		c.t = time.Now()
	}
	return c.t
}

// jobQueue is a queue's pending jobs (see the top of this file).
type jobQueue struct {
	levels map[uint16]*level // the priorities in use, with lanes or idle
	heap   []*level          // those with a lane in turn, the lowest priority first
	size   int               // pending jobs, without those taken out
}

// level is one priority's tenants in turn.
type level struct {
	prio  uint16
	at    int // index in heap; -1 while its ring is empty
	ring  deque[*lane]
	lanes int // lanes of this priority
	dead  int // lanes dropped, still in ring
}

// maxIdleLevels is how many priorities without jobs a queue keeps, for
// when they have jobs again: a queue whose jobs of several priorities come
// and go would otherwise make and drop a level for each job.
const maxIdleLevels = 64

func (q *jobQueue) len() int { return q.size }

// level returns the level of prio, made if there is none.
func (q *jobQueue) level(prio uint16) *level {
	if len(q.heap) > 0 && q.heap[0].prio == prio { // most queues use one priority
		return q.heap[0]
	}
	l := q.levels[prio]
	if l == nil {
		if q.levels == nil {
			q.levels = make(map[uint16]*level)
		}
		l = &level{prio: prio, at: -1}
		q.levels[prio] = l
	}
	return l
}

// settle takes l out of the heap when its ring is empty (it stays idle,
// or is forgotten when it has no lane and the queue has maxIdleLevels
// idle already), and compacts a ring of mostly dropped lanes.
func (q *jobQueue) settle(l *level) {
	if l.dead > 64 && l.dead > l.ring.len()/2 {
		var kept deque[*lane]
		for i := range l.ring.len() {
			if ln := l.ring.at(i); !ln.dead {
				kept.pushBack(ln)
			}
		}
		l.ring, l.dead = kept, 0
	}
	if l.ring.len() > 0 || l.at < 0 {
		return
	}
	l.ring.clear()
	l.dead = 0
	if l.lanes == 0 && len(q.levels)-len(q.heap) >= maxIdleLevels {
		delete(q.levels, l.prio)
	}
	i, last := l.at, len(q.heap)-1
	if i != last {
		q.swap(i, last)
	}
	l.at = -1
	q.heap[last] = nil
	q.heap = q.heap[:last]
	if i < last { // the level that was last is at i now
		q.down(i)
		q.up(i)
	}
}

func (q *jobQueue) push(l *level) {
	l.at = len(q.heap)
	q.heap = append(q.heap, l)
	q.up(l.at)
}

// oldest returns the job stored first among the heads of q's lanes and
// the jobs of q waiting in limiters' lines, or nil. It looks at every
// lane and every line: for listings, not for dispatch.
func (b *Broker) oldest(q *queue) *job {
	var old *job
	for _, t := range q.tenants {
		for _, ln := range t.lanes {
			if ln.skipStale(); ln.jobs.len() == 0 {
				continue
			}
			if j := ln.jobs.front(); old == nil || j.enqueued < old.enqueued {
				old = j
			}
		}
	}
	for _, lm := range b.limiters {
		for i := range lm.line.len() {
			if j := lm.line.at(i); j.q == q && j.state == pending && (old == nil || j.enqueued < old.enqueued) {
				old = j
			}
		}
	}
	return old
}

func (q *jobQueue) swap(i, k int) {
	q.heap[i], q.heap[k] = q.heap[k], q.heap[i]
	q.heap[i].at, q.heap[k].at = i, k
}

func (q *jobQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if q.heap[p].prio <= q.heap[i].prio {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *jobQueue) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(q.heap) {
			return
		}
		if c+1 < len(q.heap) && q.heap[c+1].prio < q.heap[c].prio {
			c++
		}
		if q.heap[i].prio <= q.heap[c].prio {
			return
		}
		q.swap(i, c)
		i = c
	}
}

// deque is a FIFO that can also take one back at its head.
type deque[T any] struct {
	buf        []T
	head, size int
}

func (d *deque[T]) len() int { return d.size }

func (d *deque[T]) grow() {
	if d.size < len(d.buf) {
		return
	}
	buf := make([]T, max(16, 2*len(d.buf)))
	for i := 0; i < d.size; i++ {
		buf[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = buf, 0
}

func (d *deque[T]) pushBack(x T) {
	d.grow()
	d.buf[(d.head+d.size)%len(d.buf)] = x
	d.size++
}

func (d *deque[T]) pushFront(x T) {
	d.grow()
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = x
	d.size++
}

func (d *deque[T]) at(i int) T { return d.buf[(d.head+i)%len(d.buf)] }

// clear empties the deque, keeping its buffer.
func (d *deque[T]) clear() {
	var zero T
	for i := range d.size {
		d.buf[(d.head+i)%len(d.buf)] = zero
	}
	d.head, d.size = 0, 0
}

func (d *deque[T]) front() T { return d.buf[d.head] }

func (d *deque[T]) popFront() T {
	var zero T
	x := d.buf[d.head]
	d.buf[d.head] = zero
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return x
}
