package broker

import "github.com/eventmq/emq/store"

// queue is one named queue: its pending jobs in FIFO order and the workers
// that serve it.
type queue struct {
	name    string
	jobs    deque
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
		j.holder = nil
		b.inFlight--
		b.freed(j.q)
	}
	b.timers.stop(j)
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

// remove takes j out, wherever it is (an admin's action: linear).
func (d *deque) remove(j *job) {
	for i := 0; i < d.size; i++ {
		if d.buf[(d.head+i)%len(d.buf)] != j {
			continue
		}
		for k := i; k < d.size-1; k++ {
			d.buf[(d.head+k)%len(d.buf)] = d.buf[(d.head+k+1)%len(d.buf)]
		}
		d.buf[(d.head+d.size-1)%len(d.buf)] = nil
		d.size--
		return
	}
}

func (d *deque) front() *job { return d.buf[d.head] }

func (d *deque) popFront() *job {
	j := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return j
}
