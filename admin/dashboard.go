package admin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/internal/ui"
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
//	POST /api/v1/jobs/remove?FILTERS[&confirm=yes]   delete the pending, dead, done or cancelled jobs the filters match
//	POST /api/v1/jobs/{msgid}/cancel, /api/v1/jobs/cancel?FILTERS[&confirm=yes]   cancel one job, or those the filters match
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

// access is what an admin request may do: what its token (or the
// session of a token) gives. On the wire it is a login's "role".
type access int

const (
	noAccess access = iota
	readAccess
	fullAccess
	producerAccess // sends jobs and reads results, nothing else (producerRoutes)
)

// producerRoutes are the routes the producer token may use.
var producerRoutes = map[string]bool{
	"POST /api/v1/queues/{queue}/jobs": true,
	"GET /api/v1/jobs/{msgid}/result":  true,
}

// sessions are the dashboard's logins.
type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

type session struct {
	access  access
	expires time.Time
}

// add starts a session of an access and returns its id. Each access has
// MaxSessions: logins with the read-only token cannot end the full
// token's sessions.
func (s *sessions) add(a access, now time.Time) string {
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
		case v.access == a:
			n++
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
	}
	if n >= MaxSessions {
		delete(s.m, oldest)
	}
	s.m[id] = session{access: a, expires: now.Add(SessionTTL)}
	return id
}

// access is what session id may do, noAccess when it is unknown or over.
func (s *sessions) access(id string, now time.Time) access {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok || now.After(v.expires) {
		return noAccess
	}
	return v.access
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// authNeeded reports whether the admin listener wants a token.
func (s *Server) authNeeded() bool {
	return s.opts.Token != "" || s.opts.ReadToken != "" || s.opts.ProducerToken != ""
}

// tokenAccess is what token (a Bearer token, or one typed at the login
// page) gives.
func (s *Server) tokenAccess(token string) access {
	got := []byte(token)
	switch {
	case s.opts.Token != "" && subtle.ConstantTimeCompare(got, []byte(s.opts.Token)) == 1:
		return fullAccess
	case s.opts.ReadToken != "" && subtle.ConstantTimeCompare(got, []byte(s.opts.ReadToken)) == 1:
		return readAccess
	case s.opts.ProducerToken != "" && subtle.ConstantTimeCompare(got, []byte(s.opts.ProducerToken)) == 1:
		return producerAccess
	}
	return noAccess
}

// requestAccess is what r may do: its Bearer token's access, else its
// session's; everything when no token is configured.
func (s *Server) requestAccess(r *http.Request) access {
	if !s.authNeeded() {
		return fullAccess
	}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return noAccess
		}
		return s.tokenAccess(token)
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return s.sessions.access(c.Value, time.Now())
	}
	return noAccess
}

// String is the access's name on the wire (a login's "role").
func (a access) String() string {
	switch a {
	case fullAccess:
		return "full"
	case readAccess:
		return "read"
	case producerAccess:
		return "producer"
	}
	return ""
}

// dashboardRoutes adds the dashboard's pages and session calls to mux;
// they need no role (see authorize).
func (s *Server) dashboardRoutes(mux *http.ServeMux) {
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
		writeJSON(w, http.StatusOK, map[string]any{"auth": s.authNeeded(), "role": s.requestAccess(r).String()})
	})
	mux.HandleFunc("POST /ui/login", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
			refuse(w, http.StatusBadRequest, "invalid", `login: want {"token": "..."}`)
			return
		}
		if !s.authNeeded() {
			writeJSON(w, http.StatusOK, map[string]string{"role": fullAccess.String()})
			return
		}
		a := s.tokenAccess(in.Token)
		if a == producerAccess {
			refuse(w, http.StatusForbidden, "producer_only", "the producer token sends jobs and reads their results: it cannot log in to the dashboard")
			return
		}
		if a == noAccess {
			s.loginLog.Warn(s.log, "dashboard login refused: wrong token", "from", r.RemoteAddr)
			refuse(w, http.StatusUnauthorized, "unauthorized", "wrong token")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.sessions.add(a, time.Now()), Path: "/",
			MaxAge: int(SessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		writeJSON(w, http.StatusOK, map[string]string{"role": a.String()})
	})
	mux.HandleFunc("POST /ui/logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(SessionCookie); err == nil {
			s.sessions.end(c.Value)
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
// a role (publicPath's excepted), and a change needs the full one; the
// producer's requests are only those of producerRoutes (mux says which
// route a request is for).
func (s *Server) authorize(next http.Handler, mux *http.ServeMux) http.Handler {
	if !s.authNeeded() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if publicPath(r) {
			next.ServeHTTP(w, r)
			return
		}
		switch s.requestAccess(r) {
		case fullAccess:
		case producerAccess:
			if _, pattern := mux.Handler(r); !producerRoutes[pattern] {
				refuse(w, http.StatusForbidden, "producer_only", "the producer token may only send jobs (POST /api/v1/queues/{queue}/jobs) "+
					"and read their results (GET /api/v1/jobs/{msgid}/result)")
				return
			}
		case readAccess:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				refuse(w, http.StatusForbidden, "read_only", "the read-only admin token may not change anything")
				return
			}
			if r.URL.Path == "/api/v1/backup" {
				refuse(w, http.StatusForbidden, "read_only", "a backup holds every job's payload: it needs the full admin token")
				return
			}
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="emq"`)
			refuse(w, http.StatusUnauthorized, "unauthorized", "missing or wrong admin token (Authorization: Bearer TOKEN, or the dashboard's login)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Overview is what the dashboard's first page shows: every queue's
// counts (QueueInfo) and the broker's counters, from what the broker
// holds and the journal's indexes, never from listing jobs.
type Overview struct {
	Time       time.Time          `json:"time"`
	Mode       string             `json:"role"` // "single": one broker on its own journal; "leader" of a group
	Ready      bool               `json:"ready"`
	Stats      StatsInfo          `json:"stats"`
	Queues     []broker.QueueInfo `json:"queues"`
	Workers    int                `json:"workers"`
	Schedulers int                `json:"schedulers"`
}

// overviewCache is the Overview the streams last sent: one a second
// serves them all.
type overviewCache struct {
	mu sync.Mutex
	at time.Time
	o  Overview
}

func (s *Server) sharedOverview(ctx context.Context, a API) (Overview, error) {
	c := &s.overviews
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < 900*time.Millisecond {
		return c.o, nil
	}
	o, err := a.Overview(ctx)
	if err == nil {
		c.o, c.at = o, time.Now()
	}
	return o, err
}

// serveOverview sends an Overview now and then every ?every= (1s, at
// least 1s, at most 1m) as Server-Sent Events, until the client leaves.
// At most MaxEventListeners such streams run at once, besides as many
// listeners of the event stream. They share one Overview a second.
func (s *Server) serveOverview(w http.ResponseWriter, r *http.Request) {
	every := time.Second
	if v := r.URL.Query().Get("every"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > time.Minute {
			refuse(w, http.StatusBadRequest, "bad_filter", fmt.Sprintf("every %q: want a duration from 1s to 1m", v))
			return
		}
		every = d
	}
	t := s.current()
	if t == nil {
		s.noBroker(w)
		return
	}
	if n := s.streams.Add(1); s.opts.MaxStreams > 0 && n > int64(s.opts.MaxStreams) {
		s.streams.Add(-1)
		refuse(w, http.StatusServiceUnavailable, "unavailable", "too many overview streams (max-event-listeners)")
		return
	}
	defer s.streams.Add(-1)
	send := startSSE(w)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		o, err := s.sharedOverview(r.Context(), t.api)
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
		case <-t.b.Stopped():
			return
		}
	}
}
