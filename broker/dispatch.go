package broker

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/eventmq/emq/emqp"
)

// queue is one named queue: its pending jobs in FIFO order and the workers
// that serve it.
type queue struct {
	name    string
	jobs    deque
	live    int // jobs held in memory (journaling, pending, delayed, in flight)
	workers []*peer
}

func (b *Broker) queue(name string) *queue {
	q := b.queues[name]
	if q == nil {
		q = &queue{name: name}
		b.queues[name] = q
	}
	return q
}

// peer is a worker: it INFORMed and has not been lost.
type peer struct {
	key      peerKey
	queues   []served // highest weight first
	free     int      // slots offered by READY and not yet used
	held     map[string]*job
	lastSeen time.Time
	lastUsed uint64 // when it last got a job, in dispatch order
}

type served struct {
	q      *queue
	weight int
}

func (w *peer) weight(q *queue) int {
	for _, s := range w.queues {
		if s.q == q {
			return s.weight
		}
	}
	return 0
}

// inform registers a worker, or renews a known one's queues.
func (b *Broker) inform(from peerKey, m *emqp.Inform) {
	if m.PeerType == emqp.PeerScheduler {
		b.addScheduler(from, m)
		return
	}
	if i := b.findScheduler(from); i >= 0 {
		b.removeScheduler(i, "the peer INFORMed again as a worker")
	}
	w := b.workers[from]
	if w == nil {
		w = &peer{key: from, held: make(map[string]*job)}
		b.workers[from] = w
	} else {
		b.removeWorker(w)
		b.workers[from] = w
	}
	w.lastSeen, w.free, w.queues = time.Now(), 0, w.queues[:0]
	queues := m.Queues
	if len(queues) == 0 {
		queues = []emqp.Queue{{Weight: emqp.DefaultWeight, Name: "default"}}
	}
	for _, mq := range queues {
		q := b.queue(mq.Name)
		if slices.ContainsFunc(w.queues, func(s served) bool { return s.q == q }) {
			continue
		}
		w.queues = append(w.queues, served{q, mq.Weight})
		q.workers = append(q.workers, w)
	}
	slices.SortStableFunc(w.queues, func(x, y served) int { return cmp.Compare(y.weight, x.weight) })
	b.log.Info("worker joined", "peer", peerName(from), "queues", queueNames(w.queues), "type", m.PeerType)
	b.ack(from, m.MsgID)
	b.beatKey(w.key, time.Now())
}

func queueNames(s []served) []string {
	names := make([]string, len(s))
	for i := range s {
		names[i] = s[i].q.name
	}
	return names
}

// removeWorker takes w out of the worker list and its queues.
func (b *Broker) removeWorker(w *peer) {
	delete(b.workers, w.key)
	for _, s := range w.queues {
		s.q.workers = slices.DeleteFunc(s.q.workers, func(x *peer) bool { return x == w })
		b.dropIfUnused(s.q)
	}
}

// dropIfUnused forgets a queue with no jobs and no workers, so that queue
// names that come and go do not pile up.
func (b *Broker) dropIfUnused(q *queue) {
	if q.live == 0 && len(q.workers) == 0 {
		delete(b.queues, q.name)
	}
}

// offer gives a worker with free slots jobs from its highest-weight queue
// that has some.
func (b *Broker) offer(w *peer) {
	for w.free > 0 {
		var q *queue
		for _, s := range w.queues {
			if s.q.jobs.len() > 0 {
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
	for q.jobs.len() > 0 {
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

// deliver sends job j to worker w, using one of its slots.
func (b *Broker) deliver(w *peer, j *job) {
	w.free--
	b.useSeq++
	w.lastUsed = b.useSeq
	h := j.headers
	if !h.ReplyRequested() { // so that every worker answers with REPLY
		h = h.Set(emqp.HeaderReplyRequested, "")
	}
	if j.attempts > 0 {
		h = h.Set(HeaderAttempt, strconv.Itoa(int(j.attempts)+1))
	}
	b.send(w.key, &emqp.Request{MsgID: j.id, Queue: j.q.name, Headers: h, Payload: j.payload})
	b.stats.Dispatched.Add(1)
	j.state, j.holder = inFlight, w
	w.held[j.id] = j
	if j.timeout > 0 {
		j.deadline = time.Now().Add(j.timeout).UnixNano()
	}
}

// release takes j from the worker holding it.
func (b *Broker) release(j *job) {
	if j.holder != nil {
		delete(j.holder.held, j.id)
		j.holder = nil
	}
}

// heartbeat sends HEARTBEAT to every worker and scheduler.
func (b *Broker) heartbeat(now time.Time) {
	for _, w := range b.workers {
		b.beatKey(w.key, now)
	}
	for _, s := range b.schedulers {
		b.beatKey(s.key, now)
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
