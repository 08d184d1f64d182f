package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eventmq/emq/store"
)

// The event stream: what happens to jobs, workers and queues, as it
// happens, for whoever listens (Listen: admin's GET /api/v1/events, emq
// tail). The loop
// emits; with no listener an emit costs one length check. Each listener
// has a buffer of at most Options.EventBuffer events that the loop
// appends to and its reader takes whole, woken at most once per batch:
// one that falls that far behind is dropped (ErrDropped), never waited
// for.

// Kinds of Event.
const (
	EventReceived      = "received"       // a trail's first: when it was stored (its Enqueued)
	EventAcked         = "acked"          // stored and ACKed
	EventDispatched    = "dispatched"     // given to a worker (Attempt: which delivery)
	EventReplied       = "replied"        // its worker replied: done
	EventFailed        = "failed"         // its worker sent FAIL (Reason)
	EventTimedOut      = "timed_out"      // its timeout passed while held
	EventOverdue       = "overdue"        // held past OverdueAfter without a timeout; it runs on
	EventWorkerLost    = "worker_lost"    // the worker holding it was lost (Reason)
	EventRetry         = "retry"          // waits for its backoff, then runs again
	EventRequeued      = "requeued"       // back at the head of its queue
	EventBuried        = "buried"         // out of attempts: a dead letter (Reason)
	EventRevived       = "revived"        // a dead letter sent back by an admin
	EventRemoved       = "removed"        // deleted by an admin
	EventCancelled     = "cancelled"      // cancelled (Reason: by whom); never runs again
	EventWaiting       = "waiting"        // stored and ACKed, it waits for other jobs or a batch
	EventReleased      = "released"       // what it waited for is done: pending now
	EventProgress      = "progress"       // its worker reported progress (Reason: the report)
	EventPurged        = "purged"         // a queue's pending jobs deleted by an admin
	EventWorkerJoined  = "worker_joined"  // a worker INFORMed (Reason: its queues)
	EventWorkerLeft    = "worker_left"    // a worker is gone (Reason)
	EventQueueControls = "queue_controls" // an operator changed a queue's controls
	EventTenant        = "tenant"         // an operator changed a tenant's own settings (Queue; Reason: the tenant)
	EventLimiter       = "limiter"        // an operator set or removed a named limiter (Reason: its name)
	EventPayloadRead   = "payload_read"   // a payload or result was read through the admin API (Reason: which; By, From: who)
)

// Event is one thing that happened.
type Event struct {
	Time     time.Time            `json:"time"`
	Kind     string               `json:"kind"`
	Queue    string               `json:"queue,omitempty"`
	MsgID    string               `json:"msgid,omitempty"`
	Worker   string               `json:"worker,omitempty"`
	Attempt  int                  `json:"attempt,omitempty"`
	Reason   string               `json:"reason,omitempty"`
	Controls *store.QueueSettings `json:"controls,omitempty"`
	// By and From say who read a payload (EventPayloadRead): the role
	// (admin, read, producer; "session" after it for the dashboard's;
	// "no token" where none is set) and the remote address.
	By   string `json:"by,omitempty"`
	From string `json:"from,omitempty"`
}

// listener is one reader of the stream. The loop owns the list and
// appends; the reader takes what came, all at once (Events.Next).
type listener struct {
	queue, msgid string        // only these ("" = all)
	wake         chan struct{} // something came (capacity 1)
	mu           sync.Mutex
	buf          []Event // at most Options.EventBuffer
	spare        []Event // the reader's last batch, to reuse
	end          error   // ErrDropped or ErrStopped: nothing more comes
}

// Why a stream ends.
var (
	ErrTooManyListeners = errors.New("too many event listeners (max-event-listeners)")
	ErrDropped          = errors.New("this event listener fell behind (event-buffer) and was dropped")
)

// Events is one listener's stream of events.
type Events struct {
	b *Broker
	l *listener
}

// Listen adds a listener of the events of queue and msgid ("" = every
// one). It ends when it falls Options.EventBuffer events behind
// (ErrDropped), when the broker stops (ErrStopped), or on Close.
func (b *Broker) Listen(ctx context.Context, queue, msgid string) (*Events, error) {
	l := &listener{queue: queue, msgid: msgid, wake: make(chan struct{}, 1)}
	added, err := query(ctx, b, func() bool {
		if len(b.listeners) >= b.opts.MaxEventListeners {
			return false
		}
		b.listeners = append(b.listeners, l)
		return true
	})
	if err != nil {
		b.post(func() { b.unlisten(l, ErrStopped) }) // in case it was added after all
		return nil, err
	}
	full := !added
	if full && b.opts.MaxEventListeners == 0 {
		return nil, fmt.Errorf("%w: the event stream is off (max-event-listeners 0)", ErrTooManyListeners)
	}
	if full {
		return nil, ErrTooManyListeners
	}
	return &Events{b, l}, nil
}

// Next returns the events that came since the last call, in order,
// waiting for one if none has. The slice is valid until the next call.
// After the last events it returns why the stream ended.
func (s *Events) Next(ctx context.Context) ([]Event, error) {
	l := s.l
	for {
		l.mu.Lock()
		if len(l.buf) > 0 {
			out := l.buf
			l.buf, l.spare = l.spare[:0], out
			l.mu.Unlock()
			return out, nil
		}
		end := l.end
		l.mu.Unlock()
		if end != nil {
			return nil, end
		}
		select {
		case <-l.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close ends the stream.
func (s *Events) Close() { s.b.post(func() { s.b.unlisten(s.l, ErrStopped) }) }

// unlisten removes l, if it is still listening, with the reason its
// stream ends.
func (b *Broker) unlisten(l *listener, why error) {
	i := slices.Index(b.listeners, l)
	if i < 0 {
		return
	}
	b.listeners = slices.Delete(b.listeners, i, i+1)
	l.mu.Lock()
	l.end = why
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	if why == ErrDropped {
		b.stats.ListenersDropped.Add(1)
		b.log.Warn("event listener dropped: it fell behind", "buffer", b.opts.EventBuffer, "queue", l.queue, "msgid", l.msgid)
	}
}

// emit gives e to every listener that wants it.
func (b *Broker) emit(e Event) {
	if len(b.listeners) == 0 {
		return
	}
	e.Time = time.Now()
	for i := 0; i < len(b.listeners); i++ {
		l := b.listeners[i]
		if l.queue != "" && l.queue != e.Queue || l.msgid != "" && l.msgid != e.MsgID {
			continue
		}
		l.mu.Lock()
		full := len(l.buf) >= b.opts.EventBuffer
		if !full {
			l.buf = append(l.buf, e)
		}
		l.mu.Unlock()
		if full {
			b.unlisten(l, ErrDropped)
			i--
			continue
		}
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// PayloadRead puts an EventPayloadRead on the event stream: what of job
// msgid (of queue) was read ("payload", "result", ...), by whom and
// from where. It does not wait for the loop.
func (b *Broker) PayloadRead(queue, msgid, what, by, from string) {
	b.post(func() {
		b.emit(Event{Kind: EventPayloadRead, Queue: queue, MsgID: msgid, Reason: what, By: by, From: from})
	})
}

// emitJob is an event of job j: listeners get it, and its trail keeps it
// until the job's next journal write (takeTrail), but acked, which is
// the job's Enqueued, and removed and revived, which end or start it.
func (b *Broker) emitJob(kind string, j *job, reason string) {
	var worker string
	if j.holder != nil {
		worker = j.holder.name
	}
	attempt := 0
	if kind == EventDispatched {
		attempt = int(j.attempts) + 1
	}
	switch kind {
	case EventAcked, EventRemoved, EventRevived, EventWaiting:
	default:
		t := b.trails[j]
		if len(t) == store.MaxTrail { // given out again and again, never written: the last ones
			t = append(t[:0], t[1:]...)
		}
		b.trails[j] = append(t, store.TrailEvent{Time: time.Now(), Kind: kind, Worker: worker, Attempt: attempt, Reason: reason})
	}
	if len(b.listeners) > 0 {
		b.emit(Event{Kind: kind, Queue: j.q.name, MsgID: j.id, Worker: worker, Attempt: attempt, Reason: reason})
	}
	b.tr.event(kind, j, reason)
}

// AdminRevived is the trail of a dead job an admin sends back.
func AdminRevived() []store.TrailEvent {
	return []store.TrailEvent{{Time: time.Now(), Kind: EventRevived, Reason: "by an admin"}}
}

// takeTrail returns the events of j not yet written, and forgets them:
// the caller writes them with its change.
func (b *Broker) takeTrail(j *job) []store.TrailEvent {
	t := b.trails[j]
	delete(b.trails, j)
	return t
}
