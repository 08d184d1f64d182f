package admin

import (
	"net/http"
	"strings"
)

// Who sees payloads and results (docs/security.md, "Who sees payloads"):
//
//   - the full admin token (Bearer, or a dashboard session of it): always;
//   - the read-only token (or its session): with ShowPayloads true only;
//   - with no token set (a loopback listener, where every caller is the
//     admin and may delete, purge and back up every job): unless
//     ShowPayloads is false;
//   - the producer token: the results of the jobs it sent (jobs.go), no
//     payload.
//
// The others see sizes and metadata (headers, errors, trail): a job's or
// schedule's JSON has no preview and says payload_hidden, and what
// answers with payload or result bytes answers 403 payload_hidden. Each
// payload or result handed out is a broker.EventPayloadRead on the event
// stream, a line in the log and one more in emq_payload_reads_total.

// showsPayloads reports whether r may see payloads and results.
func (s *Server) showsPayloads(r *http.Request) bool {
	if !s.authNeeded() {
		return s.opts.ShowPayloads == nil || *s.opts.ShowPayloads
	}
	switch s.requestAccess(r) {
	case fullAccess:
		return true
	case readAccess:
		return s.opts.ShowPayloads != nil && *s.opts.ShowPayloads
	}
	return false
}

// hidePayload answers 403 payload_hidden, naming what would show it.
func (s *Server) hidePayload(w http.ResponseWriter) {
	why := "payloads and results are shown to the full admin token only; this token sees sizes and metadata " +
		"(the read-only token sees them too with admin-show-payloads=true)"
	if !s.authNeeded() {
		why = "payloads and results are hidden on this broker (admin-show-payloads=false): it shows sizes and metadata"
	}
	refuse(w, http.StatusForbidden, "payload_hidden", why)
}

// reader names who r comes from, for the event and the log: the role
// (admin, read, producer; "session" after it for a dashboard's login;
// "no token" where none is set).
func (s *Server) reader(r *http.Request) string {
	if !s.authNeeded() {
		return "no token"
	}
	role := map[access]string{fullAccess: "admin", readAccess: "read", producerAccess: "producer"}[s.requestAccess(r)]
	if r.Header.Get("Authorization") == "" {
		role += " session"
	}
	return role
}

// payloadRead records that r was handed what ("payload", "result", ...)
// of job msgid of queue (a schedule's: msgid "").
func (s *Server) payloadRead(r *http.Request, queue, msgid, what string) {
	by := s.reader(r)
	if t := s.current(); t != nil {
		t.b.PayloadRead(queue, msgid, what, by, r.RemoteAddr)
	}
	s.metrics.payloadReads.WithLabelValues(strings.TrimSuffix(by, " session")).Inc()
	if s.readLog.Allow(s.log) {
		s.log.Info("admin: payload read", "what", what, "queue", queue, "msgid", msgid, "by", by, "from", r.RemoteAddr)
	}
}

// hideJob takes the payload's bytes out of ji.
func hideJob(ji *JobInfo) {
	ji.Preview, ji.Payload, ji.Result, ji.PayloadHidden = "", "", nil, true
}

// hideSchedule takes the payload's bytes out of si.
func hideSchedule(si *ScheduleInfo) {
	si.Preview, si.Payload, si.PayloadHidden = "", "", true
}
