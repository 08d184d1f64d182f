package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/eventmq/emq/store"
)

// The event stream: what happens to jobs, workers and queues, as it
// happens, for whoever listens (GET /api/v1/events, emq tail). The loop
// emits; with no listener an emit costs one length check. Each listener
// has a buffer of Options.EventBuffer events, filled without blocking:
// one that falls that far behind is dropped (its channel closed), never
// waited for.

// Kinds of Event.
const (
	EventAcked         = "acked"          // stored and ACKed
	EventDispatched    = "dispatched"     // given to a worker (Attempt: which delivery)
	EventReplied       = "replied"        // its worker replied: done
	EventFailed        = "failed"         // its worker sent FAIL (Reason)
	EventTimedOut      = "timed_out"      // its timeout passed while held
	EventWorkerLost    = "worker_lost"    // the worker holding it was lost (Reason)
	EventRetry         = "retry"          // waits for its backoff, then runs again
	EventRequeued      = "requeued"       // back at the head of its queue
	EventBuried        = "buried"         // out of attempts: a dead letter (Reason)
	EventRevived       = "revived"        // a dead letter sent back by an admin
	EventRemoved       = "removed"        // deleted by an admin
	EventPurged        = "purged"         // a queue's pending jobs deleted by an admin
	EventWorkerJoined  = "worker_joined"  // a worker INFORMed (Reason: its queues)
	EventWorkerLeft    = "worker_left"    // a worker is gone (Reason)
	EventQueueControls = "queue_controls" // an operator changed a queue's controls
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
}

// listener is one reader of the stream; the loop owns the list.
type listener struct {
	queue, msgid string // only these ("" = all)
	ch           chan Event
}

// ErrTooManyListeners refuses a listener beyond Options.MaxEventListeners.
var ErrTooManyListeners = errors.New("too many event listeners (max-event-listeners)")

// Listen adds a listener of the events of queue and msgid ("" = every
// one). Its channel is closed when it falls Options.EventBuffer events
// behind, or when the broker stops; stop ends it earlier.
func (b *Broker) Listen(ctx context.Context, queue, msgid string) (events <-chan Event, stop func(), err error) {
	l := &listener{queue: queue, msgid: msgid, ch: make(chan Event, b.opts.EventBuffer)}
	if err := b.onLoop(ctx, func() {
		if len(b.listeners) >= b.opts.MaxEventListeners {
			err = ErrTooManyListeners
			return
		}
		b.listeners = append(b.listeners, l)
		b.listenerCount.Store(int64(len(b.listeners)))
	}); err != nil {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	return l.ch, func() { b.post(func() { b.unlisten(l, false) }) }, nil
}

// unlisten removes l, if it is still listening, and closes its channel.
func (b *Broker) unlisten(l *listener, dropped bool) {
	for i, x := range b.listeners {
		if x != l {
			continue
		}
		b.listeners = append(b.listeners[:i], b.listeners[i+1:]...)
		b.listenerCount.Store(int64(len(b.listeners)))
		close(l.ch)
		if dropped {
			b.stats.ListenersDropped.Add(1)
			b.log.Warn("event listener dropped: it fell behind", "buffer", b.opts.EventBuffer, "queue", l.queue, "msgid", l.msgid)
		}
		return
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
		select {
		case l.ch <- e:
		default:
			b.unlisten(l, true)
			i--
		}
	}
}

// emitJob emits an event of job j.
func (b *Broker) emitJob(kind string, j *job, reason string) {
	if len(b.listeners) == 0 {
		return
	}
	e := Event{Kind: kind, Queue: j.q.name, MsgID: j.id, Reason: reason}
	if j.holder != nil {
		e.Worker = peerName(j.holder.key)
	}
	b.emit(e)
}

// serveEvents streams events as Server-Sent Events: one "event: KIND" and
// one "data: JSON" line each, a comment every 15 s while quiet, and a
// last "event: dropped" if the broker dropped this listener. Each write
// must be taken by the client within 10 s.
func (b *Broker) serveEvents(w http.ResponseWriter, r *http.Request) {
	events, stop, err := b.Listen(r.Context(), r.URL.Query().Get("queue"), r.URL.Query().Get("msgid"))
	if errors.Is(err, ErrTooManyListeners) {
		writeJSON(w, http.StatusServiceUnavailable, apiError{err.Error()})
		return
	}
	if err != nil {
		reply(w, nil, err)
		return
	}
	defer stop()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(text string) bool {
		rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprint(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(": events of queue " + fmt.Sprintf("%q", r.URL.Query().Get("queue")) + "\n\n") {
		return
	}
	quiet := time.NewTicker(15 * time.Second)
	defer quiet.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				send("event: dropped\ndata: {\"reason\": \"this listener fell behind, or the broker stopped\"}\n\n")
				return
			}
			var text []byte
			for more := true; more; { // what is waiting goes in one write
				js, _ := json.Marshal(e)
				text = fmt.Appendf(text, "event: %s\ndata: %s\n\n", e.Kind, js)
				select {
				case e, more = <-events:
				default:
					more = false
				}
			}
			if !send(string(text)) {
				return
			}
		case <-quiet.C:
			if !send(": quiet\n\n") {
				return
			}
		case <-r.Context().Done():
			return
		case <-b.stopped:
			return
		}
	}
}
