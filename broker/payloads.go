package broker

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

// Payloads stay in the journal. The broker holds a job's payload only in
// the payload cache: payloads of jobs just stored, while the cache has
// room for them (Options.PayloadCache bytes in all, a sixteenth of it at
// most for one payload), so that a job
// dispatched soon after its ACK is not read back. Any other job's payload
// is read from the journal when the job is dispatched: the loop gives the
// job to a worker (its slot is used, its timeout runs) and asks the
// reader for the payloads of every job given out in that turn, in one
// read, off the loop; when they come back, the REQUESTs go out. A job
// taken back meanwhile (its worker lost, the job removed) just drops its
// payload. A read that fails leaves the job stored and pending: it is
// retried after readRetry, no attempt counted.

// readRetry is how long a job whose payload could not be read waits
// before it is dispatched again.
const readRetry = time.Second

// hold keeps payload in the cache if there is room; otherwise the job's
// payload is read from the journal when it is dispatched.
func (b *Broker) hold(j *job, payload []byte) {
	j.size = int32(len(payload))
	if len(payload) == 0 || int64(len(payload)) > b.opts.PayloadCache/16 || b.cached+int64(len(payload)) > b.opts.PayloadCache {
		return // a large one would take the room of many small ones
	}
	if len(payload) <= zmtp.ArenaMax {
		// Carved from a buffer its connection shares with other frames:
		// a copy does not keep that buffer alive.
		payload = bytes.Clone(payload)
	}
	j.payload = payload
	b.cached += int64(len(payload))
}

// uncache drops j's payload from the cache.
func (b *Broker) uncache(j *job) {
	b.cached -= int64(len(j.payload))
	j.payload = nil
}

// inMemory reports whether j can be sent without reading the journal.
func (j *job) inMemory() bool { return j.payload != nil || j.size == 0 }

// Reads are paced: one at a time, at most readBatch bytes of payloads
// each, and none while the connections' send queues hold MaxSendBuffer
// bytes or more (the loop looks again every readWait). So payloads read
// and not yet written to their workers stay within about MaxSendBuffer
// plus one batch, however many slots the workers offer.
const (
	readBatch = 16 << 20
	readWait  = 5 * time.Millisecond
)

// readPayloads starts a read of the payloads of the jobs given out
// without one, when no read is under way. It runs at the end of each
// loop turn.
func (b *Broker) readPayloads() {
	if b.readBusy || len(b.toRead) == 0 {
		return
	}
	if b.routers[frontend].QueuedBytes()+b.routers[backend].QueuedBytes() >= b.opts.MaxSendBuffer {
		if b.readLater.due.slot == 0 {
			b.timers.set(&b.readLater, b.after(time.Now(), readWait))
		}
		return
	}
	var batch []readReq
	size := int64(0)
	for len(b.toRead) > 0 && (len(batch) == 0 || size+int64(b.toRead[0].j.size) <= readBatch) {
		r := b.toRead[0]
		b.toRead = b.toRead[1:]
		if r.current() { // else taken back (and maybe given again, under a later request)
			batch = append(batch, r)
			size += int64(r.j.size)
		}
	}
	if len(b.toRead) == 0 {
		b.toRead = nil // let go of the array
	}
	if len(batch) == 0 {
		return
	}
	var msgids []string
	var at []int // index in batch of each msgid
	for i, r := range batch {
		if !r.j.inMemory() {
			msgids, at = append(msgids, r.j.id), append(at, i)
		}
	}
	b.readBusy = true
	go func() {
		payloads, errs := make([][]byte, len(batch)), make([]error, len(batch))
		err := b.journal.Payloads(msgids, func(i int, p []byte, err error) { payloads[at[i]], errs[at[i]] = p, err })
		for _, i := range at {
			if err != nil && errs[i] == nil && payloads[i] == nil {
				errs[i] = err
			}
		}
		b.post(func() { b.payloadsRead(batch, payloads, errs) })
	}()
}

// readReq is a job given out and waiting for its payload: which of its
// deliveries it was asked for (a job taken back and given again is read
// again, in its new place).
type readReq struct {
	j   *job
	seq uint32
}

func (r readReq) current() bool { return r.j.reading && r.j.readSeq == r.seq }

// payloadsRead sends the jobs whose payloads came back, if they are still
// given out and the broker still dispatches.
func (b *Broker) payloadsRead(batch []readReq, payloads [][]byte, errs []error) {
	b.readBusy = false
	now := time.Now()
	for i, r := range batch {
		j := r.j
		if !r.current() {
			continue // taken back meanwhile
		}
		switch err := errs[i]; {
		case err == nil && b.phase == serving:
			b.sendJob(j.holder, j, payloads[i])
		case err == nil: // stopping: it stays pending, journaled
			b.takeBack(j)
		case errors.Is(err, store.ErrNotFound):
			b.log.Error("the journal has no payload for a job it holds pending; the job is dropped",
				append([]any{"msgid", j.id, "err", err}, b.tr.logAttrs(j)...)...)
			b.release(j)
			b.forget(j)
		case errors.Is(err, store.ErrCorrupt): // reading it again will not mend it
			b.stats.JournalDamaged.Add(1)
			b.log.Error("the journal's record of a job is damaged; the broker no longer dispatches it (a record failing its checksum goes to the dead letters: emq dlq ls, emq journal check)",
				append([]any{"msgid", j.id, "err", err}, b.tr.logAttrs(j)...)...)
			b.release(j)
			b.forget(j)
		default:
			b.readLog.Warn(b.log, "journal could not read a payload; the job stays pending and is tried again",
				"msgid", j.id, "retry_in", readRetry, "err", err)
			b.release(j)
			j.state, j.front = delayed, true // back to the head of its queue when due
			b.timers.set(j, b.after(now, readRetry))
		}
	}
}

// startReading puts j in line for its payload, read for its holder.
func (b *Broker) startReading(j *job) {
	j.reading = true
	j.readSeq++
	j.holder.reading++
	b.toRead = append(b.toRead, readReq{j, j.readSeq})
}

// stopReading ends the wait of j for its payload. Taken back unsent, the
// job gives its worker's slot back: the worker never saw it, and will not
// offer that slot again.
func (b *Broker) stopReading(j *job, sent bool) {
	if !j.reading {
		return
	}
	j.reading = false
	w := j.holder
	w.reading--
	if !sent && b.peers[w.key] == w {
		w.free++
		b.idle = append(b.idle, w)
	}
}

// offerIdle offers their slots again to workers that got some back. It
// runs at the end of each loop turn, when the jobs taken back are in
// their queues again.
func (b *Broker) offerIdle() {
	for len(b.idle) > 0 {
		w := b.idle[0]
		b.idle = b.idle[1:]
		if b.peers[w.key] == w {
			b.offer(w)
		}
	}
	b.idle = nil
}

// takeBack puts a job given out but not sent back at the head of its
// queue: no attempt is counted, since no worker saw it.
func (b *Broker) takeBack(j *job) {
	b.release(j)
	b.tr.undelivered(j)
	j.state = pending
	j.q.jobs.pushFront(j)
}

// sendJob sends j to its worker with payload (nil: the cached one), with
// reply-requested added so that every worker answers with REPLY, and
// attempt:N from the second delivery on.
func (b *Broker) sendJob(w *peer, j *job, payload []byte) {
	b.stopReading(j, true)
	if payload == nil {
		payload = j.payload
	}
	h := j.headers
	if !h.ReplyRequested() {
		h = h.Set(emqp.HeaderReplyRequested, "")
	}
	if j.attempts > 0 {
		h = h.Set(HeaderAttempt, strconv.Itoa(int(j.attempts)+1))
	}
	h = b.tr.forwarded(j, h)
	b.send(w.key, &emqp.Request{MsgID: j.id, Queue: j.q.name, Headers: h, Payload: payload})
	b.stats.Dispatched.Add(1)
	if j.timeout > 0 { // from now: the time the worker has, not the time its payload took
		b.timers.set(j, b.after(time.Now(), j.timeout))
	} else if b.opts.OverdueAfter > 0 {
		b.timers.set(j, b.after(time.Now(), b.opts.OverdueAfter))
	}
	b.uncache(j) // the frames keep it until written
}
