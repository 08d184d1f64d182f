package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/eventmq/emq/emqp"
)

// Jobs sent from this process (package admin's HTTP job API): Enqueue
// and EnqueueBulk hand the loop a REQUEST or a BULK through the inbox,
// as a connection's reader does, from a sender of their own on the
// local endpoint; the loop handles it as any client's (the same checks,
// unique keys, limits, max-pending, the same write) and its answer, ACK
// or ERROR, goes back to the caller instead of a socket (answerLocal).
// So a job sent this way is stored once the journal's write is durable,
// exactly when an eMQP client would get its ACK; the same msgid sent
// again is answered as a resent REQUEST is.
//
// AwaitJob lets a caller wait for a job to be over (its REPLY, death,
// cancel or removal written), so that the journal then says how.

// Refusal is the broker's ERROR to a job sent in process: the code
// (emqp.Code*) and text a REQUEST's ERROR would carry.
type Refusal struct {
	Code string
	Text string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Text }

// Enqueue sends one job as a REQUEST of msgid to queue would, and
// returns once it is stored (nil: the ACK) or refused (a *Refusal). An
// error from ctx or ErrStopped leaves the outcome unknown: the job may
// be stored; send it again with the same msgid.
func (b *Broker) Enqueue(ctx context.Context, queue, msgid string, h emqp.Headers, payload []byte) error {
	if err := b.checkLocal(msgid, queue, payload); err != nil {
		return err
	}
	return b.sendLocal(ctx, &emqp.Request{MsgID: msgid, Queue: queue, Headers: h, Payload: payload})
}

// EnqueueBulk sends jobs as one BULK of msgid: all stored in one write
// (nil), or none and a *Refusal naming the first job refused
// (emqp.BulkJobOf reads its index back).
func (b *Broker) EnqueueBulk(ctx context.Context, msgid string, jobs []emqp.BulkJob) error {
	if len(jobs) == 0 {
		return &Refusal{emqp.CodeBadRequest, "a bulk needs at least one job"}
	}
	if err := checkID(msgid); err != nil {
		return &Refusal{emqp.CodeBadRequest, "the bulk's " + err.Error()}
	}
	for i, j := range jobs {
		if err := b.checkLocal(j.MsgID, j.Queue, j.Payload); err != nil {
			r := err.(*Refusal)
			return &Refusal{r.Code, emqp.BulkJobText(i, j.MsgID, r.Text)}
		}
	}
	return b.sendLocal(ctx, &emqp.Bulk{MsgID: msgid, Jobs: jobs})
}

// checkLocal refuses what the decoder and the transport refuse of a
// REQUEST from a socket: a bad msgid or queue, a payload over
// max-frame-size.
func (b *Broker) checkLocal(msgid, queue string, payload []byte) error {
	if err := checkID(msgid); err != nil {
		return &Refusal{emqp.CodeBadRequest, err.Error()}
	}
	if !emqp.ValidQueueName(queue) {
		return &Refusal{emqp.CodeBadRequest, fmt.Sprintf("queue name %s: want 1 to %d bytes of UTF-8", emqp.QuoteName(queue), emqp.MaxQueueLen)}
	}
	if max := b.opts.MaxFrameSize; max > 0 && int64(len(payload)) > max {
		return &Refusal{emqp.CodeTooLarge, fmt.Sprintf("payload of %d bytes is over max-frame-size (%d bytes)", len(payload), max)}
	}
	return nil
}

func checkID(msgid string) error {
	if msgid == "" || len(msgid) > emqp.MaxIDLen {
		return fmt.Errorf("msgid must be 1 to %d bytes, got %d", emqp.MaxIDLen, len(msgid))
	}
	return nil
}

// sendLocal hands m to the loop from a new local sender and waits for
// its answer.
func (b *Broker) sendLocal(ctx context.Context, m emqp.Message) error {
	if !b.running.Load() {
		return ErrStopped
	}
	answer := make(chan emqp.Message, 1) // one ACK or ERROR; the loop never waits
	key := peerKey{local, "api/" + strconv.FormatUint(b.localSeq.Add(1), 10)}
	select {
	case b.inbox <- inbound{from: key, msg: m, answer: func(m emqp.Message) { answer <- m }}:
	case <-b.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	var got emqp.Message
	select {
	case got = <-answer:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done: // the journal is closed: every write it took has answered
		select {
		case got = <-answer:
		default:
			return ErrStopped
		}
	}
	if e, ok := got.(*emqp.Error); ok {
		return &Refusal{e.Code, e.Text}
	}
	return nil
}

// answerLocal gives a local sender the loop's answer to its message:
// the first ACK or ERROR. Anything else (a REPLY to a job that asked for
// one) has nowhere to go.
func (b *Broker) answerLocal(key peerKey, m emqp.Message) {
	fn := b.locals[key.id]
	if fn == nil {
		return
	}
	switch m.(type) {
	case *emqp.Ack, *emqp.Error:
		delete(b.locals, key.id)
		fn(m)
	}
}

// JobWait is a caller's wait for a job to be over (AwaitJob).
type JobWait struct {
	// Held reports that, when the wait began, the broker held the job
	// (being stored, pending, delayed, in flight) or was writing its end:
	// the journal may not show it, or show it as it was.
	Held bool
	// C is closed once the job's REPLY, death, cancel or removal is
	// written: the journal says how it ended.
	C <-chan struct{}

	b     *Broker
	msgid string
	ch    chan struct{}
}

// AwaitJob starts a wait for job msgid to be over, whatever the broker
// holds of it now (a job that waits for others in the journal alone is
// over later). A caller reads the journal after starting the wait, so
// that no end is missed between, and closes the wait when done with it.
// A purge, or a workflow's cancel of a job whose parent failed, closes
// no wait: the journal says so when the caller looks again.
func (b *Broker) AwaitJob(ctx context.Context, msgid string) (*JobWait, error) {
	ch := make(chan struct{})
	held, err := query(ctx, b, func() bool {
		b.awaiting[msgid] = append(b.awaiting[msgid], ch)
		return b.jobs.get(msgid) != nil || b.ending[msgid] > 0
	})
	w := &JobWait{Held: held, C: ch, b: b, msgid: msgid, ch: ch}
	if err != nil {
		w.Close() // in case it was added after all
		return nil, err
	}
	return w, nil
}

// Close ends the wait.
func (w *JobWait) Close() {
	b := w.b
	b.post(func() {
		ws := b.awaiting[w.msgid]
		for i, ch := range ws {
			if ch == w.ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(b.awaiting, w.msgid)
		} else {
			b.awaiting[w.msgid] = ws
		}
	})
}

// over ends the waits for msgid: its end is written.
func (b *Broker) over(msgid string) {
	for _, ch := range b.awaiting[msgid] {
		close(ch)
	}
	delete(b.awaiting, msgid)
}

// endWrite counts a job's end being written (Complete, Bury) until
// landed is called.
func (b *Broker) endWrite(msgid string) (landed func()) {
	b.ending[msgid]++
	return func() {
		if b.ending[msgid]--; b.ending[msgid] <= 0 {
			delete(b.ending, msgid)
		}
		b.over(msgid)
	}
}

// keepFor is how long j's result (or its cancelled state) is kept once
// it is over: the broker's ResultTTL, or the job's keep-result header
// when that is longer.
func (b *Broker) keepFor(j *job) time.Duration {
	keep := b.opts.ResultTTL
	if k, err := j.headers.KeepResult(); err == nil && k > keep {
		keep = min(k, maxWait)
	}
	return keep
}

// keepUntil is the time keepFor runs to from now, zero for none.
func (b *Broker) keepUntil(j *job) time.Time {
	if keep := b.keepFor(j); keep > 0 {
		return time.Now().Add(keep)
	}
	return time.Time{}
}
