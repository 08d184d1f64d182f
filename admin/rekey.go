package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/eventmq/emq/store"
)

// Keys rotated online (docs/security.md, Rotating keys): POST
// /api/v1/journal/rekey[?rate=N] starts sealing again, under the
// journal's first key, what it holds under older ones (or sets the rate
// of the rekey under way) and answers 202 with its progress; GET
// answers the progress. The stats carry it too ("rekey"), and so does
// the dashboard's overview. A journal without keys is 409 no_keys.

func (l *Live) Rekey(_ context.Context, rate int) (store.RekeyStatus, error) { return l.b.Rekey(rate) }

func (l *Live) RekeyStatus(context.Context) (store.RekeyStatus, error) { return l.b.RekeyStatus(), nil }

func (o *Offline) Rekey(_ context.Context, rate int) (store.RekeyStatus, error) {
	return o.j.Rekey(rate)
}

func (o *Offline) RekeyStatus(context.Context) (store.RekeyStatus, error) {
	return o.j.RekeyStatus(), nil
}

// Rekey asks for a rekey: 202 with its progress.
func (c *Client) Rekey(ctx context.Context, rate int) (store.RekeyStatus, error) {
	var s store.RekeyStatus
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+"/api/v1/journal/rekey?rate="+strconv.Itoa(rate), nil)
	if err != nil {
		return s, err
	}
	resp, err := c.doWant(c.http, req, http.StatusAccepted)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(answer, &s)
}

func (c *Client) RekeyStatus(ctx context.Context) (s store.RekeyStatus, err error) {
	return s, c.call(ctx, "GET", "/api/v1/journal/rekey", &s)
}

func (s *Server) rekeyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v1/journal/rekey", func(w http.ResponseWriter, r *http.Request) {
		rate := 0
		if v := r.URL.Query().Get("rate"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				refuse(w, http.StatusBadRequest, "bad_filter", fmt.Sprintf("rate %q: want values a second, 0 for the default (%d)", v, store.DefaultRekeyRate))
				return
			}
			rate = n
		}
		s.with(w, func(a API) {
			st, err := a.Rekey(r.Context(), rate)
			if err != nil {
				fail(w, err)
				return
			}
			writeJSON(w, http.StatusAccepted, st)
		})
	})
	mux.HandleFunc("GET /api/v1/journal/rekey", func(w http.ResponseWriter, r *http.Request) {
		s.with(w, func(a API) { st, err := a.RekeyStatus(r.Context()); reply(w, st, err) })
	})
}
