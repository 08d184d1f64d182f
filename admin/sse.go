package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/eventmq/emq/broker"
)

// startSSE answers 200 with a Server-Sent Events stream and returns
// what writes to it: each text goes out at once (flushed) within 10 s,
// or send reports false and the stream is over.
func startSSE(w http.ResponseWriter) (send func(text []byte) bool) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return func(text []byte) bool {
		// A deadline for this write alone: over HTTP/2 one left set
		// resets the stream when it passes, written to or not.
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		defer rc.SetWriteDeadline(time.Time{})
		if _, err := w.Write(text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

// serveEvents streams events as Server-Sent Events: one "event: KIND" and
// one "data: JSON" line each, a comment every 15 s while quiet, and a
// last "event: dropped" if the broker dropped this listener. Each write
// must be taken by the client within 10 s.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	t := s.current()
	if t == nil {
		s.noBroker(w)
		return
	}
	events, err := t.api.Events(r.Context(), r.URL.Query().Get("queue"), r.URL.Query().Get("msgid"))
	if err != nil {
		fail(w, err)
		return
	}
	defer events.Close()
	send := startSSE(w)
	if !send([]byte(": listening\n\n")) {
		return
	}
	var text []byte
	for {
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		batch, err := events.Next(ctx)
		cancel()
		switch {
		case err == nil:
			text = text[:0]
			for _, e := range batch { // what came goes in one write
				js, _ := json.Marshal(e)
				text = fmt.Appendf(text, "event: %s\ndata: %s\n\n", e.Kind, js)
			}
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			text = append(text[:0], ": quiet\n\n"...)
		case errors.Is(err, broker.ErrDropped), errors.Is(err, broker.ErrStopped):
			js, _ := json.Marshal(map[string]string{"reason": err.Error()})
			send(fmt.Appendf(nil, "event: dropped\ndata: %s\n\n", js))
			return
		default: // the client went away
			return
		}
		if !send(text) {
			return
		}
	}
}
