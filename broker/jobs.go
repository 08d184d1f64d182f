package broker

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

type jobState uint8

const (
	journaling jobState = iota // Append in progress: not ACKed yet
	pending                    // in its queue's FIFO
	delayed                    // waiting for notBefore (its deadline)
	inFlight                   // held by a worker (its deadline: the timeout)
	removed                    // taken out of its queue (removed, cancelled): forgotten
)

// job is a job the broker holds in memory: every stored pending job, and
// the ones being stored. A million of them may be held, so it is kept
// small: times are unix nanoseconds (0 = none), and the payload stays in
// the journal unless the payload cache holds it (payloads.go).
type job struct {
	id        string
	q         *queue
	headers   emqp.Headers // as the client sent them
	payload   []byte       // in the payload cache; nil = in the journal only
	size      int32        // the payload's
	client    peerKey
	holder    *peer
	ten       *tenant       // its queue's tenant (fair.go)
	lim       *jobLimits    // the limiters it names; nil for none (limiters.go)
	seq       uint64        // FIFO position, from the journal
	timeout   time.Duration // 0 = none
	enqueued  int64
	notBefore int64    // delay or retry backoff
	due       deadline // delayed: notBefore; in flight: the timeout (deadlines.go)
	attempts  int32
	retries   int32  // retry-count
	prio      uint16 // priority: lower first
	state     jobState
	dropped   bool   // removed or cancelled while it was journaling: forget it once stored
	reading   bool   // given to its holder; its payload is being read
	front     bool   // delayed after a failed read: due, it goes to the head of its queue
	untraced  bool   // its sender did not sample its trace: no spans (tracing.go)
	overdue   bool   // in flight past OverdueAfter, without a timeout
	readSeq   uint32 // which delivery's read is current (payloads.go)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// newJob reads a job's known headers. A bad value is the client's error;
// a timeout over maxWait is taken as maxWait.
func newJob(id string, q *queue, h emqp.Headers) (*job, error) {
	j := new(job)
	if err := j.read(id, q, h); err != nil {
		return nil, err
	}
	return j, nil
}

// read is newJob in place, in a job made elsewhere (a replay's slab).
func (j *job) read(id string, q *queue, h emqp.Headers) error {
	*j = job{id: id, q: q, headers: h}
	retries, err := h.RetryCount(3)
	if err != nil {
		return err
	}
	j.retries = int32(min(retries, math.MaxInt32))
	if j.timeout, err = h.Timeout(); err != nil {
		return err
	}
	j.timeout = min(j.timeout, maxWait)
	if j.prio, err = h.Priority(); err != nil {
		return err
	}
	if _, err = h.Tenant(); err != nil {
		return err
	}
	names, err := h.Limits()
	if err != nil {
		return err
	}
	if names != nil {
		j.lim = &jobLimits{names: names}
	}
	return nil
}

// maxResent bounds the REQUESTs of one msgid waiting for its write to
// land; more get ERROR unavailable, so a peer resending in a loop cannot
// grow the broker's memory.
const maxResent = 256

// request handles a client's REQUEST (contract points 1 and 2). Every
// REQUEST gets exactly one answer, ACK or ERROR, whoever sends it and
// whatever state its job is in. held is what its frames hold of the
// receive budget: a new job keeps it until its write lands.
func (b *Broker) request(from peerKey, m *emqp.Request, held zmtp.Held) {
	b.stats.Received.Add(1)
	keep := false
	defer func() {
		if !keep {
			b.budget.Release(held)
		}
	}()
	if b.phase != serving {
		b.refuse(from, m.MsgID, emqp.CodeUnavailable, ErrDraining.Error())
		return
	}
	if b.elsewhere(from, m.MsgID, m.Queue) {
		return
	}
	if j := b.jobs.get(m.MsgID); j != nil {
		if j.state != journaling {
			b.stats.Duplicates.Add(1)
			b.ack(from, m.MsgID)
			return
		}
		// Answered with the first when its write lands, even when the
		// same peer sent both.
		if len(b.resent[j]) >= maxResent {
			b.refuse(from, m.MsgID, emqp.CodeUnavailable, "this msgid is being stored and was sent again too often meanwhile; send it again later")
			return
		}
		b.resent[j] = append(b.resent[j], from)
		return
	}
	// Headers first: a refused job must not leave its queue behind.
	s, err := readSent(m.MsgID, m.Headers)
	if err != nil {
		b.refuse(from, m.MsgID, emqp.CodeBadRequest, err.Error())
		return
	}
	if q := b.queues[m.Queue]; q != nil && b.opts.MaxPending > 0 && q.live >= b.opts.MaxPending {
		b.refuse(from, m.MsgID, emqp.CodeQueueFull, queueFullText(q))
		return
	}
	if name := b.undefinedLimiter(s.j); name != "" {
		b.refuse(from, m.MsgID, emqp.CodeBadRequest, undefinedLimiterText(name))
		return
	}
	keep = true
	j, sj := b.startJob(from, s, m.Queue, m.Payload, time.Now())
	b.journal.Append(sj, func(dup bool, err error) {
		b.appended(j, sj.Seq, dup, err == nil && !dup && sj.State == store.Waiting, err, held)
	})
	b.hold(j, m.Payload) // the journal has its own copy
}

// sent is a job a client sent (REQUEST, or one of a BULK's), its headers
// read: the job in memory without its queue, and what the journal will
// store of it without its queue, payload, client and times.
type sent struct {
	j     *job
	delay time.Duration
	sj    *store.Job
}

// readSent reads a sent job's headers; a bad value is the client's error
// (ERROR bad_request).
func readSent(id string, h emqp.Headers) (sent, error) {
	j, err := newJob(id, nil, h)
	if err != nil {
		return sent{}, err
	}
	delay, err := h.Delay()
	if err != nil {
		return sent{}, err
	}
	if _, err := h.KeepResult(); err != nil {
		return sent{}, err
	}
	unique, hold, err := h.Unique()
	if err != nil {
		return sent{}, err
	}
	wf, err := h.Workflow()
	if err != nil {
		return sent{}, err
	}
	return sent{j: j, delay: min(delay, maxWait), sj: &store.Job{
		MsgID:     id,
		Headers:   h.String(),
		Unique:    unique,
		UniqueFor: hold,

		After:       wf.After,
		AfterBatch:  wf.AfterBatch,
		RunIfFailed: wf.RunIfFailed,
		Batch:       wf.Batch,
		BatchOpen:   wf.BatchOpen,
	}}, nil
}

// queueFullText is the text of ERROR queue_full.
func queueFullText(q *queue) string {
	return fmt.Sprintf("queue %q holds %d jobs, the broker's limit (max-pending)", q.name, q.live)
}

// startJob holds a sent job of queue as being stored from now: in memory,
// counted in its queue and in the writes the drain waits for. It
// returns the job and its record for the journal.
func (b *Broker) startJob(from peerKey, s sent, queue string, payload []byte, now time.Time) (*job, *store.Job) {
	j, sj := s.j, s.sj
	j.q = b.queue(queue)
	if s.delay > 0 {
		j.notBefore = now.Add(s.delay).UnixNano()
	}
	j.client, j.enqueued = from, now.UnixNano()
	b.jobs.set(j.id, j)
	b.adopt(j)
	b.journaling++
	b.tr.received(j, now)
	sj.Queue, sj.Payload, sj.ClientID = queue, payload, []byte(from.id)
	sj.Enqueued, sj.NotBefore = now, fromNanos(j.notBefore)
	return j, sj
}

// appended is an Append's outcome: ACK and dispatch, or refuse. The
// REQUEST's frames are no longer needed.
func (b *Broker) appended(j *job, seq uint64, dup, waiting bool, err error, held zmtp.Held) {
	defer b.unparkAfter(j) // BULKs with j's msgid (bulk.go)
	b.journaling--
	b.budget.Release(held)
	to := []peerKey{j.client}
	if more, ok := b.resent[j]; ok { // rare: the client sent it again meanwhile
		to = append(to, more...)
		delete(b.resent, j)
	}
	if err != nil {
		code, text := b.writeRefusal(j, err)
		b.tr.refused(j, code, text)
		b.forget(j)
		for _, peer := range to {
			b.refuse(peer, j.id, code, text)
		}
		return
	}
	for _, peer := range to {
		b.ack(peer, j.id)
	}
	if dup { // stored before: dead, or done with its result kept
		b.stats.Duplicates.Add(int64(len(to)))
		if j.headers.ReplyRequested() && b.keepFor(j) > 0 {
			b.resendResult(j.id, to)
		}
	} else {
		b.stats.Duplicates.Add(int64(len(to) - 1))
	}
	b.stored(j, seq, dup, waiting, time.Now())
}

// writeRefusal is the ERROR code and text for a job whose Append failed
// (a BULK's job, when the journal named it). A fenced journal stops the
// broker; a failure of the storage itself is logged.
func (b *Broker) writeRefusal(j *job, err error) (code, text string) {
	var ue *store.UniqueError
	if errors.As(err, &ue) { // another job holds its key: not stored
		return emqp.CodeDuplicate, emqp.DuplicateText(ue.Queue, ue.Key, ue.Holder)
	}
	code = emqp.CodeUnavailable // disk full, I/O error, fenced: worth sending again
	switch {
	case errors.Is(err, store.ErrTooLarge):
		code = emqp.CodeTooLarge
	case errors.Is(err, store.ErrInvalidJob), errors.Is(err, store.ErrUnknownParent),
		errors.Is(err, store.ErrParentFailed), errors.Is(err, store.ErrUnknownBatch):
		code = emqp.CodeBadRequest
	case errors.Is(err, store.ErrFenced):
		b.fence(err)
	default:
		b.log.Error("journal write failed; job refused",
			append([]any{"msgid", j.id, "queue", j.q.name, "err", err}, b.tr.logAttrs(j)...)...)
	}
	return code, "the journal could not store the job: " + err.Error()
}

// stored is what a job's landed Append makes of it, once its sender is
// answered: forgotten if it was stored before (dup), or waits in the
// journal (waiting), else dispatchable.
func (b *Broker) stored(j *job, seq uint64, dup, waiting bool, now time.Time) {
	b.observe.Acked(time.Duration(now.UnixNano() - j.enqueued))
	if dup {
		b.forget(j)
		return
	}
	b.stats.Acked.Add(1)
	j.q.acked++
	if j.dropped { // an admin removed it meanwhile; the journal did after storing it
		b.forget(j)
		return
	}
	b.emitJob(EventAcked, j, "")
	if waiting { // the journal holds it until what it waits for is done
		b.emitJob(EventWaiting, j, "")
		b.forget(j)
		return
	}
	j.seq = seq
	b.enqueue(j, now)
}

// resendResult answers a REQUEST sent again for a job that is done, its
// result kept: the client gets the REPLY it may have missed, not a second
// run. The journal is read off the loop; a dead job has no result, and
// its ACK is the whole answer.
func (b *Broker) resendResult(msgid string, to []peerKey) {
	go func() {
		result, err := b.journal.Result(msgid)
		if err != nil {
			return
		}
		b.post(func() {
			for _, peer := range to {
				b.send(peer, &emqp.Reply{MsgID: emqp.NewID(), Payload: result, OrigMsgID: msgid})
			}
		})
	}()
}

// enqueue makes a stored job dispatchable: now, or when its time comes.
func (b *Broker) enqueue(j *job, now time.Time) {
	if wait := j.notBefore - now.UnixNano(); wait > 0 { // notBefore is a time of the wall clock, as stored
		j.state = delayed
		b.timers.set(j, b.after(now, time.Duration(wait)))
		return
	}
	j.state = pending
	j.q.jobs.pushBack(j)
	b.fill(j.q)
}

// forget drops a job from memory (it is done, dead, or was never stored).
// Its msgid may name another job by now (revived while this one, sent
// again, waited for its write), which stays.
func (b *Broker) forget(j *job) {
	if b.jobs.get(j.id) == j {
		b.jobs.del(j.id)
	}
	delete(b.trails, j)
	b.tr.forget(j)
	b.uncache(j)
	b.disown(j)
	b.dropIfUnused(j.q)
}

// reply handles a worker's REPLY (contract point 4).
func (b *Broker) reply(w *peer, m *emqp.Reply) {
	j := b.held(w, m.OrigMsgID)
	if j == nil {
		return
	}
	b.emitJob(EventReplied, j, "")
	b.release(j)
	trail := b.takeTrail(j)
	b.forget(j)
	b.stats.Replied.Add(1)
	j.q.replied++
	var result []byte
	keepUntil := b.keepUntil(j)
	if !keepUntil.IsZero() {
		result = m.Payload
	} else {
		trail = nil // deleted: no trail to keep
	}
	b.journal.Complete(j.id, result, keepUntil, trail, b.endWrite(j.id))
	if j.headers.ReplyRequested() {
		to := j.client
		if to.ep != local && !b.routers[to.ep].Connected(to.id) && b.routers[1-to.ep].Connected(to.id) {
			to.ep = 1 - to.ep
		}
		b.send(to, &emqp.Reply{MsgID: emqp.NewID(), Payload: m.Payload, OrigMsgID: j.id})
	}
}

// held returns the job msgid if w holds it; otherwise the message is late
// or foreign, and is ignored.
func (b *Broker) held(w *peer, msgid string) *job {
	if w.isWorker() {
		if j := w.held[msgid]; j != nil {
			return j
		}
	}
	b.stats.Ignored.Add(1)
	b.log.Debug("REPLY or FAIL for a job the sender does not hold; ignored", "msgid", msgid)
	return nil
}

// fail handles a worker's FAIL: retry after a backoff, or bury.
func (b *Broker) fail(w *peer, m *emqp.Fail) {
	j := b.held(w, m.OrigMsgID)
	if j == nil {
		return
	}
	b.stats.Failed.Add(1)
	j.q.failed++
	reason := m.Reason
	if reason == "" {
		reason = "the worker reported a failure"
	}
	b.emitJob(EventFailed, j, reason)
	b.release(j)
	b.attempt(j, reason, true)
}

// attempt counts a delivery that ended without a REPLY (contract point 5).
// A FAILed job waits for its backoff; a lost or timed-out one goes back to
// the head of its queue.
func (b *Broker) attempt(j *job, reason string, backoff bool) {
	j.attempts++
	if j.attempts > j.retries {
		logAttrs := b.tr.logAttrs(j) // of the attempt that ended
		b.emitJob(EventBuried, j, reason)
		trail := b.takeTrail(j)
		b.forget(j)
		b.stats.DeadLettered.Add(1)
		b.log.Warn("job out of attempts; moved to the dead letters", append([]any{"msgid", j.id, "queue", j.q.name,
			"attempts", j.attempts, "reason", reason}, logAttrs...)...)
		b.journal.Bury(j.id, reason, trail, b.endWrite(j.id))
		return
	}
	b.stats.Retried.Add(1)
	now := time.Now()
	j.notBefore = 0
	if backoff {
		d := b.opts.RetryBackoff << (j.attempts - 1)
		if d > b.opts.MaxRetryBackoff || d <= 0 {
			d = b.opts.MaxRetryBackoff
		}
		j.notBefore = now.Add(d).UnixNano()
		b.emitJob(EventRetry, j, fmt.Sprintf("runs again in %v", d))
	} else {
		b.emitJob(EventRequeued, j, "")
	}
	b.journal.RecordAttempt(j.id, reason, fromNanos(j.notBefore), b.takeTrail(j))
	if backoff {
		b.enqueue(j, now)
		return
	}
	j.state = pending
	j.q.jobs.pushFront(j)
	b.fill(j.q)
}

// undelivered: a REQUEST for a worker was never written, because it is not
// connected or does not read. No attempt is counted, and the worker's free
// slots are forgotten: it offers them again when it is back.
func (b *Broker) undelivered(to peerKey, msgid string) {
	j := b.jobs.get(msgid)
	if j == nil || j.state != inFlight || j.holder == nil || j.holder.key != to {
		return
	}
	j.holder.free = 0
	b.release(j)
	b.tr.undelivered(j)
	j.state = pending
	j.q.jobs.pushFront(j)
	b.fill(j.q)
}

// jobDue: a delayed job's time has come, or a held job's timeout passed.
func (b *Broker) jobDue(j *job, now time.Time) {
	switch j.state {
	case delayed:
		if j.front {
			j.front, j.state = false, pending
			j.q.jobs.pushFront(j)
			b.fill(j.q)
			return
		}
		b.enqueue(j, now)
	case inFlight: // sent: a job being read has no deadline yet
		if j.timeout == 0 { // no timeout: it runs on, overdue
			j.overdue = true
			b.stats.Overdue.Add(1)
			b.emitJob(EventOverdue, j, fmt.Sprintf("held by its worker for over %v", b.opts.OverdueAfter))
			return
		}
		b.stats.TimedOut.Add(1)
		b.emitJob(EventTimedOut, j, fmt.Sprintf("after %v", j.timeout))
		b.release(j)
		b.attempt(j, fmt.Sprintf("timed out after %v", j.timeout), false)
	}
}

// writeFailed logs a failed journal write that no client waits for (the
// job stays as it was stored: at-least-once), and stops the broker when
// the journal has fenced it off. It may run on any goroutine (the
// journal's, for Complete, RecordAttempt and Bury: journal.go).
func (b *Broker) writeFailed(err error, what, msgid string) {
	if err != nil && !b.noticeFence(err) {
		b.log.Error(what, "msgid", msgid, "err", err)
	}
}

// adminWriteFailed is writeFailed for an admin's change, whose caller
// gets the error: a refusal (no such job, wrong state) is not logged.
func (b *Broker) adminWriteFailed(err error, what, msgid string) {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrWrongState) {
		return
	}
	b.writeFailed(err, what, msgid)
}

// noticeFence stops the broker, from any goroutine, when err says the
// journal has fenced it off.
func (b *Broker) noticeFence(err error) bool {
	if !errors.Is(err, store.ErrFenced) {
		return false
	}
	b.post(func() { b.fence(err) })
	return true
}

// replay loads every stored pending job before the sockets are bound.
func (b *Broker) replay() (int, error) {
	now := time.Now()
	n := 0
	var slab []job
	err := b.journal.Load(func(sj *store.Job) error {
		// Replayed jobs are made in slabs: a million of them are then a few
		// thousand objects for the garbage collector, not a million (a
		// collection's marking took half as long: docs/benchmarks.md,
		// issue 49). A slab is freed when its last job is; it never
		// outgrows what the replay held.
		if len(slab) == 0 {
			slab = make([]job, replaySlab)
		}
		j := b.jobFromStore(sj, &slab[0])
		slab = slab[1:]
		b.jobs.set(j.id, j)
		b.adopt(j)
		b.enqueue(j, now)
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("replaying the journal: %w", err)
	}
	return n, nil
}

// replaySlab is how many replayed jobs are made at once (about 45 KiB).
const replaySlab = 256

// jobFromStore makes the in-memory job of a stored one; in place when
// into is not nil.
func (b *Broker) jobFromStore(sj *store.Job, into *job) *job {
	q := b.queue(sj.Queue)
	h, err := emqp.ParseHeaders(sj.Headers)
	if err != nil {
		h = emqp.Headers{} // stored by an older broker; dispatch it anyway
	}
	j := into
	if j == nil {
		j = new(job)
	}
	if err := j.read(sj.MsgID, q, h); err != nil {
		*j = job{id: sj.MsgID, q: q, headers: h, retries: 3}
	}
	j.size = int32(sj.PayloadSize)
	if sj.Payload != nil {
		b.hold(j, sj.Payload)
	}
	j.client = peerKey{frontend, b.intern(sj.ClientID)}
	j.seq, j.attempts = sj.Seq, int32(min(sj.Attempts, math.MaxInt32))
	j.notBefore, j.enqueued = nanos(sj.NotBefore), nanos(sj.Enqueued)
	return j
}

// intern returns one string per client id, so that a million replayed jobs
// of a few clients do not hold a million copies of their ids.
func (b *Broker) intern(id []byte) string {
	if s, ok := b.clientIDs[string(id)]; ok {
		return s
	}
	if len(b.clientIDs) >= 100_000 { // ids are not all alike: stop sharing
		return string(id)
	}
	s := string(id)
	b.clientIDs[s] = s
	return s
}
