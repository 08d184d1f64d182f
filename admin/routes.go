package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// Handler is the admin API, behind its guard (guard.go): the routes of
// doc.go, each answered through the API of the broker served now (a
// Live, so through the broker's named API alone).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/stats", func(w http.ResponseWriter, r *http.Request) {
		if s.current() == nil && s.opts.Group != nil { // a standby: who leads
			info := s.opts.Group()
			writeJSON(w, http.StatusOK, StatsInfo{Group: &info})
			return
		}
		s.with(w, func(a API) { st, err := a.Stats(r.Context()); reply(w, st, err) })
	})
	mux.HandleFunc("GET /api/v1/shards", func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Shards == nil {
			refuse(w, http.StatusNotFound, "not_found", "this broker is not one shard of several")
			return
		}
		v, err := s.opts.Shards(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("GET /api/v1/queues", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { qs, err := a.Queues(r.Context()); reply(w, qs, err) })
	})
	mux.HandleFunc("GET /api/v1/workers", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { ws, err := a.Workers(r.Context()); reply(w, ws, err) })
	})
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		f, err := ParseJobFilter(r.URL.Query())
		if err != nil {
			fail(w, err)
			return
		}
		s.with(w, func(a API) {
			p, err := a.Jobs(r.Context(), f)
			if !s.showsPayloads(r) {
				for i := range p.Jobs {
					hideJob(&p.Jobs[i])
				}
			}
			reply(w, p, err)
		})
	})
	mux.HandleFunc("/api/v1/jobs/{$}", func(w http.ResponseWriter, _ *http.Request) { // an empty msgid
		refuse(w, http.StatusBadRequest, "invalid", "a msgid is needed: /api/v1/jobs/MSGID")
	})
	mux.HandleFunc("GET /api/v1/jobs/{msgid}", func(w http.ResponseWriter, r *http.Request) {
		withPayload, _ := strconv.ParseBool(r.URL.Query().Get("payload"))
		shows := s.showsPayloads(r)
		if withPayload && !shows {
			s.hidePayload(w)
			return
		}
		s.with(w, func(a API) {
			ji, err := a.Job(r.Context(), r.PathValue("msgid"), withPayload)
			switch {
			case err != nil:
			case !shows:
				hideJob(&ji)
			case withPayload && ji.Result != nil:
				s.payloadRead(r, ji.Queue, ji.MsgID, "payload and result")
			case withPayload:
				s.payloadRead(r, ji.Queue, ji.MsgID, "payload")
			}
			reply(w, ji, err)
		})
	})
	mux.HandleFunc("DELETE /api/v1/jobs/{msgid}", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) {
			err := a.RemoveJob(r.Context(), r.PathValue("msgid"))
			reply(w, map[string]bool{"removed": err == nil}, err)
		})
	})
	mux.HandleFunc("POST /api/v1/jobs/{msgid}/retry", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) {
			err := a.RetryJob(r.Context(), r.PathValue("msgid"))
			reply(w, map[string]bool{"retried": err == nil}, err)
		})
	})
	mux.HandleFunc("POST /api/v1/jobs/{msgid}/cancel", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) {
			ji, err := a.CancelJob(r.Context(), r.PathValue("msgid"))
			if !s.showsPayloads(r) {
				hideJob(&ji)
			}
			reply(w, ji, err)
		})
	})
	download := func(w http.ResponseWriter, name string, data []byte) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}
	mux.HandleFunc("GET /api/v1/jobs/{msgid}/payload", func(w http.ResponseWriter, r *http.Request) {
		if !s.showsPayloads(r) {
			s.hidePayload(w)
			return
		}
		t := s.current()
		if t == nil {
			s.noBroker(w)
			return
		}
		j, err := t.b.JournalJob(r.PathValue("msgid"))
		if err != nil {
			fail(w, err)
			return
		}
		s.payloadRead(r, j.Queue, j.MsgID, "payload")
		download(w, j.MsgID+".payload", j.Payload)
	})
	mux.HandleFunc("GET /api/v1/jobs/{msgid}/result", s.getResult) // jobs.go
	mux.HandleFunc("POST /api/v1/queues/{queue}/jobs", s.postJobs)
	mux.HandleFunc("POST /api/v1/jobs/remove", func(w http.ResponseWriter, r *http.Request) {
		f, err := ParseJobFilter(r.URL.Query())
		if err != nil {
			fail(w, err)
			return
		}
		s.with(w, func(a API) {
			res, err := a.BulkRemove(r.Context(), f, r.URL.Query().Get("confirm") == "yes")
			reply(w, res, err)
		})
	})
	mux.HandleFunc("POST /api/v1/jobs/cancel", func(w http.ResponseWriter, r *http.Request) {
		f, err := ParseJobFilter(r.URL.Query())
		if err != nil {
			fail(w, err)
			return
		}
		s.with(w, func(a API) {
			res, err := a.BulkCancel(r.Context(), f, r.URL.Query().Get("confirm") == "yes")
			reply(w, res, err)
		})
	})
	for action, remove := range map[string]bool{"retry": false, "remove": true} {
		mux.HandleFunc("POST /api/v1/dead/"+action, func(w http.ResponseWriter, r *http.Request) {
			f, err := ParseJobFilter(r.URL.Query())
			if err != nil {
				fail(w, err)
				return
			}
			s.with(w, func(a API) {
				res, err := a.BulkDead(r.Context(), f, remove, r.URL.Query().Get("confirm") == "yes")
				reply(w, res, err)
			})
		})
	}
	mux.HandleFunc("POST /api/v1/queues/{queue}/purge", func(w http.ResponseWriter, r *http.Request) {
		q := r.PathValue("queue")
		if r.URL.Query().Get("confirm") != q {
			refuse(w, http.StatusBadRequest, "confirm", "purging deletes every pending job of the queue: "+
				"repeat its name as ?confirm="+q)
			return
		}
		s.with(w, func(a API) {
			n, err := a.PurgeQueue(r.Context(), q)
			reply(w, map[string]int{"removed": n}, err)
		})
	})
	s.queueRoute(mux)
	s.openAPIRoute(mux)
	s.controlRoutes(mux)
	s.flowRoutes(mux)
	mux.HandleFunc("GET /api/v1/events", s.serveEvents)
	s.scheduleRoutes(mux)
	s.batchRoutes(mux)
	s.backupRoute(mux)
	s.rekeyRoutes(mux)
	mux.HandleFunc("POST /api/v1/compact", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) {
			st, err := a.Compact(r.Context())
			reply(w, map[string]int64{"size_before": st.Before, "size_after": st.After}, err)
		})
	})
	mux.HandleFunc("GET /api/v1/overview", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { o, err := a.Overview(r.Context()); reply(w, o, err) })
	})
	mux.HandleFunc("GET /api/v1/overview/stream", s.serveOverview)
	s.dashboardRoutes(mux)
	return s.guard(s.authorize(mux, mux))
}

// with runs fn with the API of the broker served now, or answers that
// there is none.
func (s *Server) with(w http.ResponseWriter, fn func(API)) {
	t := s.current()
	if t == nil {
		s.noBroker(w)
		return
	}
	fn(t.api)
}

// noBroker answers a request for a broker's API when none is served: a
// standby names who leads.
func (s *Server) noBroker(w http.ResponseWriter) {
	if s.opts.Group != nil {
		refuse(w, http.StatusServiceUnavailable, "standby", "this broker is a standby; "+leads(s.opts.Group()))
		return
	}
	fail(w, broker.ErrStopped)
}

// leads says who leads g's group.
func leads(g GroupInfo) string {
	if g.Leader == "" {
		return "no broker leads the group now"
	}
	return g.Leader + " leads the group"
}

// readyz: 200 while the broker served is ready and not stopping.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := s.ready(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// ready says why the broker is not ready to serve, or nil when it is
// (/readyz, emq_ready).
func (s *Server) ready() error {
	t := s.current()
	var notReady error
	if t != nil && s.opts.Ready != nil {
		notReady = s.opts.Ready()
	}
	switch {
	case t != nil && t.b.Serving() && notReady == nil:
		return nil
	case notReady != nil:
		return notReady
	case t == nil && s.opts.Group != nil:
		g := s.opts.Group()
		return errors.New(g.Role.String() + ": " + leads(g))
	}
	return errors.New("not ready")
}

// serving is the broker served, or nil after answering 503: a moved
// queue's jobs go only to a broker that serves.
func (s *Server) serving(w http.ResponseWriter) *target {
	t := s.current()
	if t == nil {
		refuse(w, http.StatusServiceUnavailable, "unavailable", "no broker is serving here")
	}
	return t
}

// controlRoutes serve the queue controls: pause, resume, and settings
// (a JSON QueueChange). Each answers with the queue's controls once stored.
func (s *Server) controlRoutes(mux *http.ServeMux) {
	change := func(w http.ResponseWriter, r *http.Request, c broker.QueueChange) {
		s.with(w, func(a API) { qi, err := a.ChangeQueue(r.Context(), r.PathValue("queue"), c); reply(w, qi, err) })
	}
	paused, resumed := true, false
	mux.HandleFunc("POST /api/v1/queues/{queue}/pause", func(w http.ResponseWriter, r *http.Request) {
		change(w, r, broker.QueueChange{Paused: &paused})
	})
	mux.HandleFunc("POST /api/v1/queues/{queue}/resume", func(w http.ResponseWriter, r *http.Request) {
		change(w, r, broker.QueueChange{Paused: &resumed})
	})
	// A queue moved between shards arrives here: a JSON list of jobs as
	// the source's journal holds them (store.Job), stored as they were
	// (broker.ImportJobs); answered with how many were new.
	mux.HandleFunc("POST /api/v1/queues/{queue}/import", func(w http.ResponseWriter, r *http.Request) {
		t := s.serving(w)
		if t == nil {
			return
		}
		var jobs []*store.Job
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)).Decode(&jobs); err != nil {
			refuse(w, http.StatusBadRequest, "invalid", "import: want a JSON list of jobs: "+err.Error())
			return
		}
		for _, j := range jobs {
			if j == nil || j.Queue != r.PathValue("queue") {
				refuse(w, http.StatusBadRequest, "invalid", "import: every job must be of queue "+r.PathValue("queue"))
				return
			}
		}
		n, err := t.b.ImportJobs(r.Context(), jobs)
		reply(w, ImportResult{Imported: n}, err)
	})
	// A move sends what changed at its source since it copied the queue:
	// the jobs of the queue among these msgids go (broker.ForgetJobs).
	mux.HandleFunc("POST /api/v1/queues/{queue}/forget", func(w http.ResponseWriter, r *http.Request) {
		t := s.serving(w)
		if t == nil {
			return
		}
		var in struct {
			MsgIDs []string `json:"msgids"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)).Decode(&in); err != nil {
			refuse(w, http.StatusBadRequest, "invalid", "forget: want {\"msgids\": [...]}: "+err.Error())
			return
		}
		n, err := t.b.ForgetJobs(r.Context(), r.PathValue("queue"), in.MsgIDs)
		reply(w, ImportResult{Imported: n}, err)
	})
	// A moved queue's schedule arrives here as the source's journal holds
	// it (store.Schedule), kept as it was (broker.ImportSchedule).
	mux.HandleFunc("POST /api/v1/queues/{queue}/import-schedule", func(w http.ResponseWriter, r *http.Request) {
		t := s.serving(w)
		if t == nil {
			return
		}
		var ss store.Schedule
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)).Decode(&ss); err != nil || ss.Queue != r.PathValue("queue") {
			refuse(w, http.StatusBadRequest, "invalid", fmt.Sprintf("import-schedule: want a schedule of queue %s in JSON (%v)", r.PathValue("queue"), err))
			return
		}
		reply(w, struct{}{}, t.b.ImportSchedule(r.Context(), &ss))
	})
	mux.HandleFunc("POST /api/v1/queues/{queue}/settings", func(w http.ResponseWriter, r *http.Request) {
		var c broker.QueueChange
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			refuse(w, http.StatusBadRequest, "invalid", "queue settings: want a JSON object of paused, concurrency, rate, burst, tenant_concurrency, tenant_rate, tenant_burst: "+err.Error())
			return
		}
		change(w, r, c)
	})
}

func (s *Server) scheduleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/schedules", func(w http.ResponseWriter, r *http.Request) {
		limit, err := parseLimit(r.URL.Query().Get("limit"))
		if err != nil {
			fail(w, err)
			return
		}
		s.with(w, func(a API) {
			page, err := a.Schedules(r.Context(), r.URL.Query().Get("after"), limit)
			if !s.showsPayloads(r) {
				for i := range page.Schedules {
					hideSchedule(&page.Schedules[i])
				}
			}
			reply(w, page, err)
		})
	})
	mux.HandleFunc("POST /api/v1/schedules", func(w http.ResponseWriter, r *http.Request) {
		var sp ScheduleSpec
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)).Decode(&sp); err != nil {
			fail(w, fmt.Errorf("%w: the body is not a schedule in JSON: %v", store.ErrBadSchedule, err))
			return
		}
		s.with(w, func(a API) {
			si, err := a.AddSchedule(r.Context(), sp)
			if !s.showsPayloads(r) {
				hideSchedule(&si)
			}
			reply(w, si, err)
		})
	})
	mux.HandleFunc("GET /api/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		withPayload, _ := strconv.ParseBool(r.URL.Query().Get("payload"))
		shows := s.showsPayloads(r)
		if withPayload && !shows {
			s.hidePayload(w)
			return
		}
		s.with(w, func(a API) {
			si, err := a.Schedule(r.Context(), r.PathValue("id"), withPayload)
			switch {
			case err != nil:
			case !shows:
				hideSchedule(&si)
			case withPayload:
				s.payloadRead(r, si.Queue, "", "payload of schedule "+si.ID)
			}
			reply(w, si, err)
		})
	})
	mux.HandleFunc("DELETE /api/v1/schedules/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) {
			err := a.RemoveSchedule(r.Context(), r.PathValue("id"))
			reply(w, map[string]bool{"removed": err == nil}, err)
		})
	})
	for _, action := range []string{"pause", "resume"} {
		mux.HandleFunc("POST /api/v1/schedules/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			s.with(w, func(a API) {
				err := a.PauseSchedule(r.Context(), r.PathValue("id"), action == "pause")
				reply(w, map[string]bool{"paused": action == "pause" && err == nil}, err)
			})
		})
	}
}
