package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// flowRoutes serve flow control (DESIGN.md, "Flow control"): a queue's
// tenants and their own settings, the named limiters, and why a job
// waits.
func (s *Server) flowRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/queues/{queue}/tenants", func(w http.ResponseWriter, r *http.Request) {
		limit, err := parseLimit(r.URL.Query().Get("limit"))
		if err != nil {
			fail(w, err)
			return
		}
		offset := 0
		if v := r.URL.Query().Get("offset"); v != "" {
			if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
				fail(w, fmt.Errorf("%w: offset %q: want 0 or more", store.ErrBadFilter, v))
				return
			}
		}
		s.with(w, func(a API) {
			p, err := a.Tenants(r.Context(), r.PathValue("queue"), offset, limit)
			reply(w, p, err)
		})
	})
	// PATCH .../tenants/NAME changes some of a tenant's settings (a JSON
	// broker.TenantChange); .../tenants/ alone is the tenant "", the
	// jobs without one. Answered with its own settings as stored.
	changeTenant := func(w http.ResponseWriter, r *http.Request) {
		var c broker.TenantChange
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			refuse(w, http.StatusBadRequest, "invalid", "tenant settings: want a JSON object of concurrency, rate, burst, weight, default: "+err.Error())
			return
		}
		s.with(w, func(a API) {
			ts, err := a.ChangeTenant(r.Context(), r.PathValue("queue"), r.PathValue("tenant"), c)
			reply(w, ts, err)
		})
	}
	mux.HandleFunc("PATCH /api/v1/queues/{queue}/tenants/{tenant}", changeTenant)
	mux.HandleFunc("PATCH /api/v1/queues/{queue}/tenants/{$}", changeTenant)

	mux.HandleFunc("GET /api/v1/limiters", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { ls, err := a.Limiters(r.Context()); reply(w, ls, err) })
	})
	// PUT /api/v1/limiters/NAME makes or replaces a limiter (a JSON
	// store.LimiterSettings); answered with what is stored.
	mux.HandleFunc("PUT /api/v1/limiters/{name}", func(w http.ResponseWriter, r *http.Request) {
		var ls store.LimiterSettings
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ls); err != nil {
			refuse(w, http.StatusBadRequest, "invalid", "limiter: want a JSON object of concurrency, rate, burst: "+err.Error())
			return
		}
		s.with(w, func(a API) {
			err := a.SetLimiter(r.Context(), r.PathValue("name"), ls)
			reply(w, broker.LimiterInfo{Name: r.PathValue("name"), LimiterSettings: ls}, err)
		})
	})
	mux.HandleFunc("DELETE /api/v1/limiters/{name}", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) {
			err := a.RemoveLimiter(r.Context(), r.PathValue("name"))
			reply(w, map[string]bool{"removed": err == nil}, err)
		})
	})
	mux.HandleFunc("GET /api/v1/jobs/{msgid}/why", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { why, err := a.Why(r.Context(), r.PathValue("msgid")); reply(w, why, err) })
	})
}
