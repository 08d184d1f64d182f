package broker

import "github.com/eventmq/emq/store"

// queue is one named queue: its pending jobs in order (by priority, then
// FIFO) and the workers that serve it.
type queue struct {
	name    string
	jobs    jobQueue
	live    int // jobs held in memory (journaling, pending, delayed, in flight)
	workers []*peer

	// The operator's controls (controls.go).
	set     store.QueueSettings
	running int    // jobs held by workers, for set.Concurrency
	rate    bucket // of set.Rate
	refill  alarm  // wakes the loop when a token is due
	filling bool   // in b.toFill

	// Since the queue was made (it is forgotten when it has neither jobs
	// nor workers): for the dashboard's rates.
	acked, replied, failed int64
}

func (b *Broker) queue(name string) *queue {
	q := b.queues[name]
	if q == nil {
		q = b.newQueue(name)
		b.queues[name] = q
	}
	return q
}

// dropIfUnused forgets a queue with no jobs and no workers, so that queue
// names that come and go do not pile up.
func (b *Broker) dropIfUnused(q *queue) {
	if q.live == 0 && len(q.workers) == 0 {
		b.timers.stop(&q.refill)
		delete(b.queues, q.name)
	}
}

// offer gives a worker with free slots jobs from its highest-weight queue
// that has some its controls let go. Nothing is dispatched once the
// broker stops taking work.
func (b *Broker) offer(w *peer) {
	for w.free > 0 && b.phase == serving {
		var q *queue
		for _, s := range w.queues {
			if s.q.jobs.len() > 0 && b.canDispatch(s.q) {
				q = s.q
				break
			}
		}
		if q == nil {
			return
		}
		b.deliver(w, q.jobs.popFront())
	}
}

// fill gives q's jobs to free workers: the one weighing q highest, least
// recently used first.
func (b *Broker) fill(q *queue) {
	for q.jobs.len() > 0 && b.phase == serving && b.canDispatch(q) {
		var best *peer
		bestWeight := 0
		for _, w := range q.workers {
			if w.free == 0 {
				continue
			}
			wt := w.weight(q)
			if best == nil || wt > bestWeight || wt == bestWeight && w.lastUsed < best.lastUsed {
				best, bestWeight = w, wt
			}
		}
		if best == nil {
			return
		}
		b.deliver(best, q.jobs.popFront())
	}
}

// HeaderAttempt is added to a forwarded REQUEST from its second delivery
// on: attempt:2 is the first retry.
const HeaderAttempt = "attempt"

// deliver gives job j to worker w, using one of its slots: at once when
// its payload is in memory, else once it is read (payloads.go).
func (b *Broker) deliver(w *peer, j *job) {
	w.free--
	b.useSeq++
	w.lastUsed = b.useSeq
	j.state, j.holder = inFlight, w
	w.held[j.id] = j
	b.inFlight++
	j.q.dispatched()
	b.emitJob(EventDispatched, j, "")
	if j.inMemory() && w.reading == 0 {
		b.sendJob(w, j, nil)
		return
	}
	// Behind a read for the same worker, even a job in memory waits its
	// turn: a worker gets its jobs in the order they were given.
	b.startReading(j)
}

// release takes j from the worker holding it, and stops its timeout (and
// the sending of its payload, if it was being read).
func (b *Broker) release(j *job) {
	b.stopReading(j, false)
	if j.holder != nil {
		delete(j.holder.held, j.id)
		delete(b.progressOf, j)
		j.holder = nil
		b.inFlight--
		b.freed(j.q)
	}
	b.timers.stop(j)
}

// jobQueue is a queue's pending jobs: by priority (lower first), FIFO
// among equals, and able to take a job back at the head of its priority.
// Each priority in use is a deque; a heap orders the priorities that have
// jobs, so a push or a pop costs O(1), plus O(log p) when a priority
// starts or stops having jobs (p: the priorities in use, at most 65,536).
// A job taken out from the middle (an admin's remove, a cancel) is left
// where it is, marked by its state, and skipped when it comes up; the
// deque is compacted once it holds more of those than jobs.
type jobQueue struct {
	levels map[uint16]*level // the priorities in use, with jobs or idle
	heap   []*level          // those with jobs, the lowest priority first
	size   int               // jobs, without those taken out
}

// level is one priority's jobs.
type level struct {
	prio  uint16
	at    int // index in heap; -1 while it has no jobs
	jobs  deque
	stale int // jobs taken out, still in jobs
}

// maxIdleLevels is how many priorities without jobs a queue keeps, with
// their deques, for when they have jobs again: a queue whose jobs of
// several priorities come and go would otherwise make and drop a level
// for each job.
const maxIdleLevels = 64

func (q *jobQueue) len() int { return q.size }

// level returns the level of prio, made if it has no jobs.
func (q *jobQueue) level(prio uint16) *level {
	if len(q.heap) > 0 && q.heap[0].prio == prio { // most queues use one priority
		return q.heap[0]
	}
	l := q.levels[prio]
	switch {
	case l != nil && l.at >= 0:
		return l
	case l == nil:
		if q.levels == nil {
			q.levels = make(map[uint16]*level)
		}
		l = &level{prio: prio}
		q.levels[prio] = l
	}
	l.at = len(q.heap)
	q.heap = append(q.heap, l)
	q.up(l.at)
	return l
}

func (q *jobQueue) pushBack(j *job) {
	q.level(j.prio).jobs.pushBack(j)
	q.size++
}

// pushFront puts j at the head of its priority.
func (q *jobQueue) pushFront(j *job) {
	q.level(j.prio).jobs.pushFront(j)
	q.size++
}

// front returns the next job; the queue must not be empty.
func (q *jobQueue) front() *job {
	l := q.heap[0]
	l.skipStale()
	return l.jobs.front()
}

// popFront takes the next job; the queue must not be empty.
func (q *jobQueue) popFront() *job {
	l := q.heap[0]
	l.skipStale()
	j := l.jobs.popFront()
	q.size--
	if l.jobs.len() == l.stale {
		q.drop(l)
	}
	return j
}

// remove takes out j, a pending job of this queue, before its state
// changes: it is skipped when it comes up.
func (q *jobQueue) remove(j *job) {
	l := q.levels[j.prio]
	if l == nil || l.at < 0 {
		return
	}
	q.size--
	l.stale++
	j.state = removed
	switch {
	case l.jobs.len() == l.stale:
		q.drop(l)
	case l.stale > 64 && l.stale > l.jobs.len()/2:
		l.compact()
	}
}

// oldest returns the job stored first among the heads of the priorities;
// the queue must not be empty.
func (q *jobQueue) oldest() *job {
	var old *job
	for _, l := range q.heap {
		l.skipStale()
		if j := l.jobs.front(); old == nil || j.enqueued < old.enqueued {
			old = j
		}
	}
	return old
}

// skipStale drops the jobs taken out that are at the head.
func (l *level) skipStale() {
	for l.stale > 0 && l.jobs.front().state != pending {
		l.jobs.popFront()
		l.stale--
	}
}

// compact drops every job taken out.
func (l *level) compact() {
	var kept deque
	for i := range l.jobs.len() {
		if j := l.jobs.at(i); j.state == pending {
			kept.pushBack(j)
		}
	}
	l.jobs, l.stale = kept, 0
}

// drop takes a level whose jobs are all gone out of the heap; it stays
// idle, or is forgotten when the queue has maxIdleLevels idle already.
func (q *jobQueue) drop(l *level) {
	l.jobs.clear()
	l.stale = 0
	if len(q.levels)-len(q.heap) >= maxIdleLevels {
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

// deque is a FIFO of jobs that can also take one back at its head.
type deque struct {
	buf        []*job
	head, size int
}

func (d *deque) len() int { return d.size }

func (d *deque) grow() {
	if d.size < len(d.buf) {
		return
	}
	buf := make([]*job, max(16, 2*len(d.buf)))
	for i := 0; i < d.size; i++ {
		buf[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = buf, 0
}

func (d *deque) pushBack(j *job) {
	d.grow()
	d.buf[(d.head+d.size)%len(d.buf)] = j
	d.size++
}

func (d *deque) pushFront(j *job) {
	d.grow()
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = j
	d.size++
}

func (d *deque) at(i int) *job { return d.buf[(d.head+i)%len(d.buf)] }

// clear empties the deque, keeping its buffer.
func (d *deque) clear() {
	for i := range d.size {
		d.buf[(d.head+i)%len(d.buf)] = nil
	}
	d.head, d.size = 0, 0
}

func (d *deque) front() *job { return d.buf[d.head] }

func (d *deque) popFront() *job {
	j := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return j
}
