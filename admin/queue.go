package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// queueRoute serves one queue's load, for autoscalers (KEDA's
// metrics-api scaler, deploy/keda):
//
//	GET /api/v1/queues/{queue}[?unknown=empty]   a broker.QueueLoad
//
// A queue the broker does not know is 404, unless ?unknown=empty asks
// for it as an empty queue: the broker forgets a queue with no jobs and
// no workers, and an autoscaler that scaled its workers to zero should
// read 0 there, not an error.
func (s *Server) queueRoute(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/queues/{queue}", func(w http.ResponseWriter, r *http.Request) {
		unknown := r.URL.Query().Get("unknown")
		if unknown != "" && unknown != "empty" {
			refuse(w, http.StatusBadRequest, "bad_filter", fmt.Sprintf("unknown %q: want empty, or leave it out for a 404", unknown))
			return
		}
		t := s.current()
		if t == nil {
			s.noBroker(w)
			return
		}
		ql, err := t.b.QueueLoad(r.Context(), r.PathValue("queue"))
		if errors.Is(err, store.ErrNotFound) && unknown == "empty" {
			ql, err = broker.QueueLoad{QueueInfo: broker.QueueInfo{Name: r.PathValue("queue")}}, nil
		}
		reply(w, ql, err)
	})
}
