package broker

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eventmq/emq/internal/ui"
	"github.com/eventmq/emq/store"
)

// The dashboard: a web UI on the admin listener (internal/ui holds its
// files, embedded in the binary). Its pages call the admin API like any
// program, with a session cookie in place of a Bearer token:
//
//	GET  /                   redirects to /ui/
//	GET  /ui/...             the pages and their scripts; no data, no login needed
//	GET  /ui/session         {"auth": a token is needed, "role": "full", "read" or ""}
//	POST /ui/login           {"token": "..."}: a session cookie for that token's role
//	POST /ui/logout          ends the session
//	GET  /api/v1/overview    an Overview; /api/v1/overview/stream sends one a second (SSE)
//	GET  /api/v1/jobs/{msgid}/payload, /result   the whole payload or result, as a download
//	POST /api/v1/jobs/remove?FILTERS[&confirm=yes]   delete the pending, dead or done jobs the filters match
//
// A session is HttpOnly and SameSite=Strict, lasts SessionTTL, and is
// held in memory (at most MaxSessions of each token; the oldest goes
// first), so a restart logs everyone out. What it may do is its token's: the
// read-only token's session may read and is refused every change, as
// the token itself is. Changes from the pages carry the X-EMQ-Admin
// header and pass guardAdmin's cross-site checks like any other.

// Sessions of the dashboard.
const (
	SessionCookie = "emq_session"
	SessionTTL    = 12 * time.Hour
	MaxSessions   = 256
)

// adminRole is what an admin request may do.
type adminRole int

const (
	roleNone adminRole = iota
	roleRead
	roleFull
)

// sessions are the dashboard's logins.
type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

type session struct {
	role    adminRole
	expires time.Time
}

// add starts a session of role and returns its id. Each role has
// MaxSessions: logins with the read-only token cannot end the full
// token's sessions.
func (s *sessions) add(role adminRole, now time.Time) string {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(raw[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]session{}
	}
	var oldest string
	n := 0
	for k, v := range s.m {
		switch {
		case now.After(v.expires):
			delete(s.m, k)
		case v.role == role:
			n++
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
	}
	if n >= MaxSessions {
		delete(s.m, oldest)
	}
	s.m[id] = session{role: role, expires: now.Add(SessionTTL)}
	return id
}

// role is the role of session id, roleNone when it is unknown or over.
func (s *sessions) role(id string, now time.Time) adminRole {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok || now.After(v.expires) {
		return roleNone
	}
	return v.role
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// authNeeded reports whether the admin listener wants a token.
func (b *Broker) authNeeded() bool {
	return b.opts.AdminToken != "" || b.opts.AdminReadToken != ""
}

// tokenRole is the role token (a Bearer token, or one typed at the login
// page) gives.
func (b *Broker) tokenRole(token string) adminRole { return tokenRole(b.opts, token) }

// tokenRole is the role token gives under the tokens of o.
func tokenRole(o Options, token string) adminRole {
	got := []byte(token)
	switch {
	case o.AdminToken != "" && subtle.ConstantTimeCompare(got, []byte(o.AdminToken)) == 1:
		return roleFull
	case o.AdminReadToken != "" && subtle.ConstantTimeCompare(got, []byte(o.AdminReadToken)) == 1:
		return roleRead
	}
	return roleNone
}

// requestRole is what r may do: its Bearer token's role, else its
// session's; every role when no token is configured.
func (b *Broker) requestRole(r *http.Request) adminRole {
	if !b.authNeeded() {
		return roleFull
	}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return roleNone
		}
		return b.tokenRole(token)
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return b.sessions.role(c.Value, time.Now())
	}
	return roleNone
}

func roleName(role adminRole) string {
	switch role {
	case roleFull:
		return "full"
	case roleRead:
		return "read"
	}
	return ""
}

// dashboardRoutes adds the dashboard's pages and session calls to mux;
// they need no role (see authorize).
func (b *Broker) dashboardRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	files := http.StripPrefix("/ui/", http.FileServerFS(ui.Files))
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /ui/session", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"auth": b.authNeeded(), "role": roleName(b.requestRole(r))})
	})
	mux.HandleFunc("POST /ui/login", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
			writeJSON(w, http.StatusBadRequest, apiError{`login: want {"token": "..."}`})
			return
		}
		if !b.authNeeded() {
			writeJSON(w, http.StatusOK, map[string]string{"role": "full"})
			return
		}
		role := b.tokenRole(in.Token)
		if role == roleNone {
			b.loginLog.log(b.log, "dashboard login refused: wrong token", "from", r.RemoteAddr)
			writeJSON(w, http.StatusUnauthorized, apiError{"wrong token"})
			return
		}
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: b.sessions.add(role, time.Now()), Path: "/",
			MaxAge: int(SessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		writeJSON(w, http.StatusOK, map[string]string{"role": roleName(role)})
	})
	mux.HandleFunc("POST /ui/logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(SessionCookie); err == nil {
			b.sessions.end(c.Value)
		}
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		writeJSON(w, http.StatusOK, map[string]bool{"ended": true})
	})
}

// publicPath reports whether r needs no role: a GET of the dashboard's
// files and session, and its login and logout (the login page must load).
func publicPath(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/ui/login", p == "/ui/logout":
		return r.Method == http.MethodPost
	case p == "/", strings.HasPrefix(p, "/ui/"):
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return false
}

// authorize wraps the admin API with the token check: every request needs
// a role (publicPath's excepted), and a change needs the full one.
func (b *Broker) authorize(next http.Handler) http.Handler {
	if !b.authNeeded() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if publicPath(r) {
			next.ServeHTTP(w, r)
			return
		}
		switch b.requestRole(r) {
		case roleFull:
		case roleRead:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				writeJSON(w, http.StatusForbidden, apiError{"the read-only admin token may not change anything"})
				return
			}
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="emq"`)
			writeJSON(w, http.StatusUnauthorized, apiError{"missing or wrong admin token (Authorization: Bearer TOKEN, or the dashboard's login)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Overview is what the dashboard's first page shows: every queue's
// counts (QueueInfo) and the broker's counters, from what the broker
// holds and the journal's indexes, never from listing jobs.
type Overview struct {
	Time       time.Time   `json:"time"`
	Role       string      `json:"role"` // "single": one broker on its own journal; "leader" of a group
	Ready      bool        `json:"ready"`
	Stats      StatsInfo   `json:"stats"`
	Queues     []QueueInfo `json:"queues"`
	Workers    int         `json:"workers"`
	Schedulers int         `json:"schedulers"`
}

// Overview gathers the dashboard's first page.
func (b *Broker) Overview(ctx context.Context) (Overview, error) {
	o := Overview{Time: time.Now(), Role: b.role(), Ready: b.isReady.Load(), Stats: b.statsInfo()}
	err := b.onLoop(ctx, func() {
		for _, p := range b.peers {
			if p.isWorker() {
				o.Workers++
			}
		}
		o.Schedulers = len(b.schedulers)
	})
	if err != nil {
		return o, err
	}
	o.Queues, err = b.queuesWithStored(ctx)
	if o.Queues == nil {
		o.Queues = []QueueInfo{}
	}
	return o, err
}

// overviewRoutes adds the overview, its stream, the downloads and the
// bulk remove to mux.
func (b *Broker) overviewRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/overview", func(w http.ResponseWriter, r *http.Request) {
		o, err := b.Overview(r.Context())
		reply(w, o, err)
	})
	mux.HandleFunc("GET /api/v1/overview/stream", b.serveOverview)
	download := func(w http.ResponseWriter, name string, data []byte) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}
	mux.HandleFunc("GET /api/v1/jobs/{msgid}/payload", func(w http.ResponseWriter, r *http.Request) {
		j, err := b.journal.Get(r.PathValue("msgid"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		download(w, j.MsgID+".payload", j.Payload)
	})
	mux.HandleFunc("GET /api/v1/jobs/{msgid}/result", func(w http.ResponseWriter, r *http.Request) {
		res, err := b.journal.Result(r.PathValue("msgid"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		download(w, r.PathValue("msgid")+".result", res)
	})
	mux.HandleFunc("POST /api/v1/jobs/remove", func(w http.ResponseWriter, r *http.Request) {
		f, err := ParseJobFilter(r.URL.Query())
		if err != nil {
			reply(w, nil, err)
			return
		}
		res, err := b.BulkRemove(r.Context(), f, r.URL.Query().Get("confirm") == "yes")
		reply(w, res, err)
	})
}

// ErrNeedState is BulkRemove's answer to a filter without a stored state.
var ErrNeedState = fmt.Errorf("%w: state: bulk remove wants pending, dead or done", store.ErrBadFilter)

// BulkRemove deletes every pending, dead or done job f matches (f.State
// says which; pending leaves the jobs workers hold alone), a page of the
// journal at a time; not confirmed, it only counts them. Dead jobs share
// commits (BulkDead); the others are removed one by one, as RemoveJob
// does. It stops when ctx ends.
func (b *Broker) BulkRemove(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error) {
	st, _ := store.ParseState(f.State)
	switch {
	case f.State == "dead":
		return b.BulkDead(ctx, f, true, confirmed)
	case f.State != "pending" && f.State != "done":
		return BulkResult{}, ErrNeedState
	}
	var keep func(*store.Job) bool
	if st == store.Pending { // the journal keeps jobs in flight as pending
		held, err := b.InFlight(ctx, f.Queue)
		if err != nil {
			return BulkResult{}, err
		}
		keep = func(j *store.Job) bool { return held[j.MsgID] == "" }
	}
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (n int, err error) {
			for _, j := range jobs {
				switch err := b.removeJob(ctx, j.MsgID, st == store.Pending); {
				case err == nil:
					n++
				case errors.Is(err, store.ErrNotFound), errors.Is(err, ErrHeld): // gone meanwhile, or dispatched since the count
				default:
					return n, err
				}
			}
			return n, nil
		}
	}
	return JobPages(ctx, b.journal, f, st, keep, act)
}

// overviewCache is the Overview the streams last sent: one a second
// serves them all.
type overviewCache struct {
	mu sync.Mutex
	at time.Time
	o  Overview
}

func (b *Broker) sharedOverview(ctx context.Context) (Overview, error) {
	c := &b.overviews
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < 900*time.Millisecond {
		return c.o, nil
	}
	o, err := b.Overview(ctx)
	if err == nil {
		c.o, c.at = o, time.Now()
	}
	return o, err
}

// serveOverview sends an Overview now and then every ?every= (1s, at
// least 1s, at most 1m) as Server-Sent Events, until the client leaves.
// At most MaxEventListeners such streams run at once, besides as many
// listeners of the event stream. They share one Overview a second.
func (b *Broker) serveOverview(w http.ResponseWriter, r *http.Request) {
	every := time.Second
	if v := r.URL.Query().Get("every"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Minute {
			writeJSON(w, http.StatusBadRequest, apiError{fmt.Sprintf("every %q: want a duration from 1s to 1m", v)})
			return
		}
		every = d
	}
	if n := b.overviewStreams.Add(1); b.opts.MaxEventListeners > 0 && n > int64(b.opts.MaxEventListeners) {
		b.overviewStreams.Add(-1)
		writeJSON(w, http.StatusServiceUnavailable, apiError{"too many overview streams (max-event-listeners)"})
		return
	}
	defer b.overviewStreams.Add(-1)
	send := startSSE(w)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		o, err := b.sharedOverview(r.Context())
		if err != nil { // the broker stops, or the client left
			js, _ := json.Marshal(map[string]string{"reason": err.Error()})
			send(fmt.Appendf(nil, "event: ended\ndata: %s\n\n", js))
			return
		}
		js, _ := json.Marshal(o)
		if !send(fmt.Appendf(nil, "event: overview\ndata: %s\n\n", js)) {
			return
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-b.stopped:
			return
		}
	}
}
