package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// Cancelling and progress.
//
// A cancel takes a job out for good, in whatever state the broker holds
// it: pending or delayed, it leaves its queue at once; in flight, its
// worker is sent CANCEL and the job is no longer its own, so a REPLY or
// FAIL that comes later is ignored (the worker's slot comes back with its
// READY, as always); journaling, it is dropped once its write lands (the
// client gets its ACK: it was stored). The journal then moves it out
// (store.Journal.Cancel), kept in state cancelled for ResultTTL when
// retain-done is on, with who cancelled it in its trail. A job that is
// dead, done or cancelled already, or unknown, is refused by the journal
// (store.ErrWrongState, store.ErrNotFound) and nothing changes.
//
// PROGRESS from the worker holding a job is kept in memory only, the
// latest per job while it is in flight (a restart or a new delivery
// starts without one): it is a view of a running job, not part of the job.
// Each is an event, at most progressEvents a second per job; the reports
// between are kept, not announced.

// Progress is the latest PROGRESS a job's worker sent.
type Progress struct {
	Percent int       `json:"percent"` // 0 to 100; -1 when the worker gave no number
	Note    string    `json:"note,omitempty"`
	Time    time.Time `json:"time"`
	Worker  string    `json:"worker,omitempty"`
}

// progressEvents bounds the progress events of one job, a second.
const progressEvents = 10

type progressReport struct {
	Progress
	announced time.Time // the last event of it
}

// Cancel cancels the job msgid (see the section above); by says who
// cancelled it, for its trail ("admin", a client's id). It returns the
// job as the journal had it when it was cancelled, once the journal has
// the change.
func (b *Broker) Cancel(ctx context.Context, msgid, by string) (*store.Job, error) {
	return change(ctx, b, func(reply func(*store.Job, error)) { b.cancel(msgid, by, reply) })
}

// CancelJobs cancels the jobs msgids names, their writes queued at once,
// and returns how many it cancelled; one gone or finished meanwhile is
// skipped, the first other refusal returned.
func (b *Broker) CancelJobs(ctx context.Context, msgids []string, by string) (int, error) {
	return changeN(ctx, b, len(msgids), func(each func(error)) {
		for _, id := range msgids {
			b.cancel(id, by, func(_ *store.Job, err error) { each(err) })
		}
	})
}

// cancel runs on the loop; done gets the journal's outcome, on the loop.
func (b *Broker) cancel(msgid, by string, done func(*store.Job, error)) {
	// A job not in memory is not pending: the journal refuses it, unless
	// it waits for other jobs (workflow.go), which only the journal holds.
	trail := CancelledBy(by)
	var logAttrs []any
	inMemory := b.jobs.get(msgid) != nil
	var keepUntil time.Time // kept as its result would be (keep-result, retain-done)
	if b.opts.ResultTTL > 0 {
		keepUntil = time.Now().Add(b.opts.ResultTTL)
	}
	if j := b.jobs.get(msgid); j != nil {
		keepUntil = b.keepUntil(j)
		logAttrs = b.tr.logAttrs(j)
		if j.holder != nil {
			b.send(j.holder.key, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: j.id})
		}
		b.emitJob(EventCancelled, j, trail[0].Reason)
		trail = b.takeTrail(j)
		if j.state == journaling {
			j.dropped = true
		} else {
			b.unlink(j)
		}
	}
	b.journal.Cancel(msgid, keepUntil, trail, func(sj *store.Job, err error) {
		if err == nil {
			b.over(msgid)
			b.stats.Cancelled.Add(1)
			b.log.Info("job cancelled", append([]any{"msgid", msgid, "queue", sj.Queue, "by", by}, logAttrs...)...)
			if !inMemory { // it waited; or it was released meanwhile, and is in memory by now
				b.cancelledOutside(sj, trail[len(trail)-1].Reason)
			}
		}
		b.adminWriteFailed(err, "journal could not cancel a job; it stays stored and runs again after the next start", msgid)
		done(sj, err)
	})
}

// clientCancel answers a client's CANCEL: ACK once the journal has it,
// or ERROR not_found, conflict or unavailable.
func (b *Broker) clientCancel(from peerKey, m *emqp.Cancel) {
	if b.phase != serving {
		b.refuse(from, m.MsgID, emqp.CodeUnavailable, ErrDraining.Error())
		return
	}
	b.cancel(m.OrigMsgID, "client "+printableID(from.id), func(_ *store.Job, err error) {
		switch {
		case err == nil:
			b.ack(from, m.MsgID)
		case errors.Is(err, store.ErrNotFound):
			b.refuse(from, m.MsgID, emqp.CodeNotFound, fmt.Sprintf("no job %s is stored", m.OrigMsgID))
		case errors.Is(err, store.ErrWrongState):
			b.refuse(from, m.MsgID, emqp.CodeConflict, err.Error())
		default:
			b.refuse(from, m.MsgID, emqp.CodeUnavailable, "the journal could not cancel the job: "+err.Error())
		}
	})
}

// progress keeps a worker's report on a job it holds; any other is
// ignored and counted, as a late REPLY is.
func (b *Broker) progress(w *peer, m *emqp.Progress) {
	if !w.isWorker() || w.held[m.OrigMsgID] == nil {
		b.stats.Ignored.Add(1)
		return
	}
	j := w.held[m.OrigMsgID]
	b.stats.Progress.Add(1)
	p := b.progressOf[j]
	if p == nil {
		p = &progressReport{}
		b.progressOf[j] = p
	}
	pct, ok := m.Percent()
	if !ok {
		pct = -1
	}
	now := time.Now()
	p.Progress = Progress{Percent: pct, Note: m.Note(), Time: now, Worker: w.name}
	if now.Sub(p.announced) < time.Second/progressEvents || len(b.listeners) == 0 {
		return
	}
	p.announced = now
	b.emit(Event{Kind: EventProgress, Queue: j.q.name, MsgID: j.id, Worker: w.name, Reason: m.Text})
}

// JobProgress returns the latest progress of a job in flight (nil: none).
func (b *Broker) JobProgress(ctx context.Context, msgid string) (*Progress, error) {
	return query(ctx, b, func() *Progress {
		if j := b.jobs.get(msgid); j != nil {
			return b.holding(j).Progress
		}
		return nil
	})
}

// CancelledBy is the trail of a job cancelled by whom.
func CancelledBy(by string) []store.TrailEvent {
	return []store.TrailEvent{{Time: time.Now(), Kind: EventCancelled, Reason: "cancelled by " + by}}
}
