package broker

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eventmq/emq/emqp"
)

// peerRole is what a peer INFORMed as. Clients are not peers: a job
// keeps its client's routing id, and nothing else is known of clients.
// (What a peer may send is its Roles, security.go.)
type peerRole uint8

const (
	peerWorker    peerRole = iota + 1 // takes jobs: INFORM with type worker (or none)
	peerScheduler                     // EventMQ's emq-scheduler: INFORM with type scheduler
)

func (r peerRole) String() string {
	switch r {
	case peerWorker:
		return "worker"
	case peerScheduler:
		return "scheduler"
	}
	return "peerRole(" + strconv.Itoa(int(r)) + ")"
}

// peer is one entry of the peer table, b.peers, keyed by (endpoint,
// routing id): a peer that INFORMed and has not been lost. Every message
// starts with one lookup there.
type peer struct {
	key      peerKey
	name     string // peerName(key), for events and trails
	role     peerRole
	lastSeen time.Time
	due      deadline // HeartbeatTimeout after lastSeen (deadlines.go)

	// Workers only.
	queues   []served // highest weight first
	free     int      // slots offered by READY and not yet used
	held     map[string]*job
	reading  int    // of those, given but waiting for their payloads
	lastUsed uint64 // when it last got a job, in dispatch order
}

func (p *peer) isWorker() bool { return p != nil && p.role == peerWorker }

type served struct {
	q      *queue
	weight int
}

func (p *peer) weight(q *queue) int {
	for _, s := range p.queues {
		if s.q == q {
			return s.weight
		}
	}
	return 0
}

// inform registers a peer, or renews a known one. A known peer that
// INFORMs as the other role is lost in its old role first.
func (b *Broker) inform(p *peer, from peerKey, m *emqp.Inform) {
	r := peerWorker
	if m.PeerType == emqp.PeerScheduler {
		r = peerScheduler
	}
	if p != nil && p.role != r {
		b.lose(p, "the peer INFORMed again as a "+r.String())
		p = nil
	}
	now := time.Now()
	if p == nil {
		p = &peer{key: from, role: r, name: peerName(from)}
		b.peers[from] = p
		if r == peerScheduler {
			b.schedulers = append(b.schedulers, p)
		}
		if len(b.peers) == 1 {
			b.timers.set(&b.beat, b.after(now, b.opts.HeartbeatInterval))
		}
	}
	p.lastSeen = now
	b.timers.set(p, b.after(now, b.opts.HeartbeatTimeout))
	if r == peerWorker {
		b.serve(p, m.Queues)
	}
	b.log.Info(r.String()+" joined", "peer", p.name, "queues", queueNames(p.queues), "type", m.PeerType)
	if r == peerWorker {
		b.emit(Event{Kind: EventWorkerJoined, Worker: p.name, Reason: strings.Join(queueNames(p.queues), ",")})
	}
	b.ack(from, m.MsgID)
	b.beatKey(from, now)
}

// serve sets the queues of a worker, new or known. A known worker's free
// slots go back to zero (it offers them again); the jobs it holds stay
// its own.
func (b *Broker) serve(w *peer, queues []emqp.Queue) {
	if w.held == nil {
		w.held = make(map[string]*job)
	}
	b.leaveQueues(w)
	w.free = 0
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
		delete(b.lastServed, q.name)
	}
	slices.SortStableFunc(w.queues, func(x, y served) int { return cmp.Compare(y.weight, x.weight) })
}

// leaveQueues takes a worker out of the queues it serves.
func (b *Broker) leaveQueues(w *peer) {
	for _, s := range w.queues {
		s.q.workers = slices.DeleteFunc(s.q.workers, func(x *peer) bool { return x == w })
		if len(s.q.workers) == 0 && len(b.lastServed) < maxLastServed {
			b.lastServed[s.q.name] = time.Now()
		}
		b.dropIfUnused(s.q)
	}
	w.queues = w.queues[:0]
}

func queueNames(s []served) []string {
	names := make([]string, len(s))
	for i := range s {
		names[i] = s[i].q.name
	}
	return names
}

func queueWeights(s []served) []int {
	weights := make([]int, len(s))
	for i := range s {
		weights[i] = s[i].weight
	}
	return weights
}

// lose ends a peer: it leaves the table, and a worker's jobs go back to
// the head of their queues, each with one more attempt.
func (b *Broker) lose(p *peer, reason string) {
	b.log.Info(p.role.String()+" lost", "peer", p.name, "reason", reason, "jobs", len(p.held))
	if p.role == peerWorker {
		b.emit(Event{Kind: EventWorkerLeft, Worker: p.name, Reason: reason})
	}
	delete(b.peers, p.key)
	b.timers.stop(p)
	if p.role == peerScheduler {
		b.schedulers = slices.DeleteFunc(b.schedulers, func(x *peer) bool { return x == p })
		return
	}
	b.leaveQueues(p)
	jobs := make([]*job, 0, len(p.held))
	for _, j := range p.held {
		jobs = append(jobs, j)
	}
	// Latest first, so the oldest ends up at the head.
	slices.SortFunc(jobs, func(x, y *job) int { return cmp.Compare(y.seq, x.seq) })
	for _, j := range jobs {
		if j.reading { // never sent to it
			b.takeBack(j)
			b.fill(j.q)
			continue
		}
		b.emitJob(EventWorkerLost, j, reason)
		b.release(j)
		b.attempt(j, reason, false)
	}
}

// peerDue: a peer's heartbeat deadline has come. Lost if it was silent
// all along; otherwise its deadline moves on from when it was last heard.
func (b *Broker) peerDue(p *peer, now time.Time) {
	if silent := now.Sub(p.lastSeen); silent < b.opts.HeartbeatTimeout {
		b.timers.set(p, b.after(now, b.opts.HeartbeatTimeout-silent))
		return
	}
	b.lose(p, fmt.Sprintf("no message for %v (heartbeat timeout)", b.opts.HeartbeatTimeout))
}

// heartbeat sends HEARTBEAT to every peer, and comes again while there
// are peers.
func (b *Broker) heartbeat(now time.Time) {
	for key := range b.peers {
		b.beatKey(key, now)
	}
	if len(b.peers) > 0 {
		b.timers.set(&b.beat, b.after(now, b.opts.HeartbeatInterval))
	}
}

func (b *Broker) beatKey(key peerKey, now time.Time) {
	b.send(key, &emqp.Heartbeat{MsgID: emqp.NewID(), Time: strconv.FormatInt(now.Unix(), 10)})
}

// forwardSchedule passes a SCHEDULE, unchanged, to the next scheduler in
// turn that is connected now (ForwardSchedules: EventMQ's split, where a
// scheduler process keeps the schedules, as EventMQ's router does): one
// that lost its connection may come back within the heartbeat timeout,
// but what is sent to it meanwhile is lost. With no scheduler connected
// the client gets ERROR unavailable rather than a silent drop.
func (b *Broker) forwardSchedule(from peerKey, m *emqp.Schedule) {
	for range b.schedulers {
		s := b.schedulers[0]
		b.schedulers = append(b.schedulers[1:], s)
		if b.connected(s.key) {
			b.send(s.key, m)
			b.stats.SchedulesForwarded.Add(1)
			return
		}
	}
	b.refuse(from, m.MsgID, emqp.CodeUnavailable, noScheduler)
}

// forwardUnschedule passes an UNSCHEDULE to every connected scheduler:
// any of them may hold the schedule.
func (b *Broker) forwardUnschedule(from peerKey, m *emqp.Unschedule) {
	sent := false
	for _, s := range b.schedulers {
		if b.connected(s.key) {
			b.send(s.key, m)
			sent = true
		}
	}
	if !sent {
		b.refuse(from, m.MsgID, emqp.CodeUnavailable, noScheduler)
		return
	}
	b.stats.SchedulesForwarded.Add(1)
}

func (b *Broker) connected(key peerKey) bool { return b.routers[key.ep].Connected(key.id) }

const noScheduler = "no scheduler is connected: this broker passes SCHEDULE and UNSCHEDULE to an EventMQ scheduler (INFORM with peer type scheduler; forward-schedules is set) and stores no schedules itself"
