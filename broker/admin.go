package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/eventmq/emq/store"
)

// The admin HTTP API, on Options.Admin. JSON under /api/v1:
//
//	GET    /healthz, /readyz                 process up; journal open, replayed, sockets bound
//	GET    /metrics                          Prometheus text format
//	GET    /api/v1/stats                     counters (pub/sub's too, when it is on)
//	GET    /api/v1/queues                    []QueueInfo, with each queue's controls
//	GET    /api/v1/workers                   []WorkerInfo
//	GET    /api/v1/jobs?queue=&state=&limit=&after=&msgid_prefix=&header=&error=&older_than=&newer_than=
//	                                         a page of JobInfo (state pending, inflight, dead or done; search.go)
//	GET    /api/v1/jobs/{msgid}[?payload=1]  one JobInfo with its trail; the whole payload (and a done job's result) in base64 when asked
//	DELETE /api/v1/jobs/{msgid}              delete a job in any state
//	POST   /api/v1/jobs/{msgid}/retry        a dead job back to its queue
//	POST   /api/v1/dead/retry, /dead/remove?FILTERS[&confirm=yes]   every dead job the filters match; counts only without confirm
//	POST   /api/v1/queues/{queue}/purge?confirm={queue}   delete the queue's pending jobs
//	POST   /api/v1/queues/{queue}/pause, /resume, /settings   an operator's controls (controls.go)
//	GET    /api/v1/events?queue=&msgid=      Server-Sent Events as things happen (events.go)
//	POST   /api/v1/compact                   rewrite the journal without free space
//	GET    /api/v1/schedules?limit=&after=    a SchedulePage, by id
//	POST   /api/v1/schedules                 add one: {"queue", "every" (30s) or "cron", "headers", "payload" or "payload_base64"}
//	GET    /api/v1/schedules/{id}[?payload=1]
//	DELETE /api/v1/schedules/{id}
//	POST   /api/v1/schedules/{id}/pause, /resume
//	GET    /api/v1/overview[/stream]          the dashboard's first page, once or once a second (dashboard.go)
//	GET    /api/v1/jobs/{msgid}/payload, /result   the whole payload or result, as a download
//	POST   /api/v1/jobs/remove?state=pending|dead|done&FILTERS[&confirm=yes]   bulk delete; counts only without confirm
//	GET    /, /ui/...                         the dashboard, and its login (dashboard.go)
//
// Every request must name this listener as its Host, and one that changes
// something needs the header X-EMQ-Admin (or a JSON body) and, from a
// browser, this listener's origin: adminguard.go keeps other sites' pages
// out. With an AdminToken every request needs "Authorization: Bearer
// TOKEN" or a dashboard session of that token; an AdminReadToken (or
// its session) may be used instead for GETs only (403 otherwise); the
// dashboard's files and login need neither. Without a token, the broker
// refuses to bind Admin to a non-loopback address. With AdminTLSCert and AdminTLSKey it is HTTPS.
// Errors are {"error": "..."} with a status by class (errorStatus): 400 a
// bad parameter or filter, 401 no token, 403 a cross-site request or a
// change with the read-only token, 421 a
// foreign Host, 404 no such job, 409 a job in the
// wrong state for the change, 501 not done by this journal (compact),
// 503 the broker is stopping, 500 the journal failed (I/O).

// JobInfo is a job as the admin API shows it.
type JobInfo struct {
	MsgID       string    `json:"msgid"`
	Queue       string    `json:"queue"`
	State       string    `json:"state"` // pending, inflight, dead or done
	Worker      string    `json:"worker,omitempty"`
	Headers     string    `json:"headers"`
	Enqueued    time.Time `json:"enqueued"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	NotBefore   time.Time `json:"not_before,omitzero"`
	Finished    time.Time `json:"finished,omitzero"` // done: when its worker replied
	PayloadSize int       `json:"payload_size"`
	Preview     string    `json:"preview"`                  // the payload's first bytes as text; invalid UTF-8 shown as U+FFFD
	Payload     string    `json:"payload_base64,omitempty"` // only when asked for
	Result      *string   `json:"result_base64,omitempty"`  // done: its worker's REPLY, when the payload is asked for
	// Trail is what happened to it, oldest first: received (when it was
	// stored), then the events its trail keeps (store.Job.Trail), then
	// those of the broker not yet written (a delivery under way).
	// Only in the answer about one job (JobInfoFrom), not in listings.
	Trail []store.TrailEvent `json:"trail,omitempty"`
}

// PreviewLen is how many payload bytes a JobInfo's preview shows.
const PreviewLen = 200

// NewJobInfo describes a stored job; worker is who holds it ("" = nobody).
func NewJobInfo(j *store.Job, worker string, withPayload bool) JobInfo {
	ji := JobInfo{
		MsgID: j.MsgID, Queue: j.Queue, State: j.State.String(), Worker: worker,
		Headers: j.Headers, Enqueued: j.Enqueued, Attempts: j.Attempts, LastError: j.LastError,
		NotBefore: j.NotBefore, Finished: j.Finished, PayloadSize: len(j.Payload),
	}
	if worker != "" {
		ji.State = "inflight"
	}
	ji.Preview = preview(j.Payload)
	if withPayload {
		ji.Payload = base64.StdEncoding.EncodeToString(j.Payload)
	}
	return ji
}

// JobInfoFrom is NewJobInfo with the job's trail (received first) and,
// for a done job and withPayload, the result the journal keeps for it.
func JobInfoFrom(journal store.Journal, j *store.Job, worker string, withPayload bool) JobInfo {
	ji := NewJobInfo(j, worker, withPayload)
	ji.Trail = append([]store.TrailEvent{{Time: j.Enqueued, Kind: EventReceived}}, j.Trail...)
	if j.State == store.Done && withPayload {
		if res, err := journal.Result(j.MsgID); err == nil {
			s := base64.StdEncoding.EncodeToString(res)
			ji.Result = &s
		}
	}
	return ji
}

// preview is a payload's first PreviewLen bytes as text: invalid UTF-8
// shown as U+FFFD, control characters but newline and tab as dots.
func preview(payload []byte) string {
	p := payload[:min(len(payload), PreviewLen)]
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return '.'
		}
		return r
	}, strings.ToValidUTF8(string(p), string(utf8.RuneError)))
}

// JobPage is a page of jobs; pass Next as after for the next page.
type JobPage struct {
	Jobs []JobInfo `json:"jobs"`
	Next string    `json:"next,omitempty"`
}

// StatsInfo is the broker's counters as the stats API shows them: a JSON
// object with every counter of Counters by name, in that order, then
// "protocol_errors": the ERRORs sent, by code, in the order of ErrorCodes.
type StatsInfo struct {
	Counters []NamedCount
	Errors   []NamedCount
	// Group, last as "group", says who leads a replicated group and
	// what this broker is in it; absent for a broker on its own.
	Group *GroupInfo
}

// GroupInfo is a broker's place in a replicated group.
type GroupInfo struct {
	Role      string `json:"role"`   // "leader" or "standby"
	Name      string `json:"name"`   // this broker's name in the election
	Leader    string `json:"leader"` // the leader's name ("" while there is none)
	Elections int64  `json:"elections"`
}

// NamedCount is one counter's name and value.
type NamedCount struct {
	Name  string
	Value int64
}

// Get returns the value of the counter called name (0 when absent).
func (si StatsInfo) Get(name string) int64 {
	for _, c := range si.Counters {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// MarshalJSON writes the counters as one object, in their order.
func (si StatsInfo) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	member := func(name string, v int64) {
		key, _ := json.Marshal(name)
		fmt.Fprintf(&buf, "%s:%d", key, v)
	}
	buf.WriteByte('{')
	for _, c := range si.Counters {
		member(c.Name, c.Value)
		buf.WriteByte(',')
	}
	buf.WriteString(`"` + ErrorsName + `":{`)
	for i, e := range si.Errors {
		if i > 0 {
			buf.WriteByte(',')
		}
		member(e.Name, e.Value)
	}
	buf.WriteByte('}')
	if si.Group != nil {
		g, _ := json.Marshal(si.Group)
		buf.WriteString(`,"group":`)
		buf.Write(g)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON wrote, keeping the broker's order
// (a newer broker's counters included).
func (si *StatsInfo) UnmarshalJSON(data []byte) error {
	*si = StatsInfo{}
	var top orderedCounts
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	for _, c := range top {
		if c.Name == "group" {
			si.Group = new(GroupInfo)
			if err := json.Unmarshal(c.raw, si.Group); err != nil {
				return fmt.Errorf("stats: group: %w", err)
			}
			continue
		}
		if c.Name != ErrorsName {
			var v int64
			if err := json.Unmarshal(c.raw, &v); err != nil {
				return fmt.Errorf("stats: counter %s: %w", c.Name, err)
			}
			si.Counters = append(si.Counters, NamedCount{c.Name, v})
			continue
		}
		var errs orderedCounts
		if err := json.Unmarshal(c.raw, &errs); err != nil {
			return fmt.Errorf("stats: %s: %w", ErrorsName, err)
		}
		for _, e := range errs {
			var v int64
			if err := json.Unmarshal(e.raw, &v); err != nil {
				return fmt.Errorf("stats: %s %s: %w", ErrorsName, e.Name, err)
			}
			si.Errors = append(si.Errors, NamedCount{e.Name, v})
		}
	}
	return nil
}

// orderedCounts is a JSON object's members in the order they came.
type orderedCounts []struct {
	Name string
	raw  json.RawMessage
}

func (o *orderedCounts) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("want a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		*o = append(*o, struct {
			Name string
			raw  json.RawMessage
		}{tok.(string), raw})
	}
	return nil
}

func (b *Broker) statsInfo() StatsInfo {
	var si StatsInfo
	for _, c := range Counters {
		si.Counters = append(si.Counters, NamedCount{c.Name, c.Value(&b.stats)})
	}
	for _, code := range ErrorCodes {
		si.Errors = append(si.Errors, NamedCount{code, b.stats.Errors(code)})
	}
	if b.pub.Load() != nil {
		ps := b.PubSub()
		for i, v := range []int64{int64(ps.Published), int64(ps.Delivered), int64(ps.Dropped), int64(ps.Subscribers)} {
			si.Counters = append(si.Counters, NamedCount{PubSubCounters[i], v})
		}
	}
	if g := b.opts.Group; g != nil {
		info := g.Info()
		si.Group = &info
	}
	return si
}

// PubSubCounters are the names of pub/sub's figures in the stats API,
// after Counters, when pub/sub is on.
var PubSubCounters = []string{"pubsub_published", "pubsub_delivered", "pubsub_dropped", "pubsub_subscribers"}

// isLoopback reports whether an admin address only listens on loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminHandler is the admin API.
func (b *Broker) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !b.isReady.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(b.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, b.statsInfo())
	})
	mux.HandleFunc("GET /api/v1/queues", func(w http.ResponseWriter, r *http.Request) {
		qs, err := b.queuesWithStored(r.Context())
		reply(w, qs, err)
	})
	mux.HandleFunc("GET /api/v1/workers", func(w http.ResponseWriter, r *http.Request) {
		ws, err := b.Workers(r.Context())
		reply(w, ws, err)
	})
	mux.HandleFunc("GET /api/v1/jobs", b.listJobs)
	mux.HandleFunc("GET /api/v1/jobs/{msgid}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("msgid")
		j, err := b.journal.Get(id)
		if err != nil {
			reply(w, nil, err)
			return
		}
		held, err := b.InFlight(r.Context(), j.Queue)
		withPayload, _ := strconv.ParseBool(r.URL.Query().Get("payload"))
		ji := JobInfoFrom(b.journal, j, held[id], withPayload)
		if err == nil {
			var live []store.TrailEvent
			err = b.onLoop(r.Context(), func() {
				if lj := b.jobs[id]; lj != nil {
					live = slices.Clone(b.trails[lj])
				}
			})
			ji.Trail = append(ji.Trail, live...)
		}
		reply(w, ji, err)
	})
	mux.HandleFunc("DELETE /api/v1/jobs/{msgid}", func(w http.ResponseWriter, r *http.Request) {
		err := b.RemoveJob(r.Context(), r.PathValue("msgid"))
		reply(w, map[string]bool{"removed": err == nil}, err)
	})
	mux.HandleFunc("POST /api/v1/jobs/{msgid}/retry", func(w http.ResponseWriter, r *http.Request) {
		err := b.RetryDead(r.Context(), r.PathValue("msgid"))
		reply(w, map[string]bool{"retried": err == nil}, err)
	})
	mux.HandleFunc("POST /api/v1/queues/{queue}/purge", func(w http.ResponseWriter, r *http.Request) {
		q := r.PathValue("queue")
		if r.URL.Query().Get("confirm") != q {
			writeJSON(w, http.StatusBadRequest, apiError{"purging deletes every pending job of the queue: " +
				"repeat its name as ?confirm=" + q})
			return
		}
		n, err := b.PurgeQueue(r.Context(), q)
		reply(w, map[string]int{"removed": n}, err)
	})
	b.controlRoutes(mux)
	b.bulkRoutes(mux)
	mux.HandleFunc("GET /api/v1/events", b.serveEvents)
	b.scheduleRoutes(mux)
	mux.HandleFunc("POST /api/v1/compact", func(w http.ResponseWriter, _ *http.Request) {
		st, err := b.Compact()
		reply(w, map[string]int64{"size_before": st.Before, "size_after": st.After}, err)
	})
	b.overviewRoutes(mux)
	b.dashboardRoutes(mux)
	return b.guardAdmin(b.authorize(mux))
}

// queuesWithStored is Queues with the dead and done counts of the journal,
// and the queues that only have dead or done jobs.
func (b *Broker) queuesWithStored(ctx context.Context) ([]QueueInfo, error) {
	qs, err := b.Queues(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := b.journal.Counts(store.Dead, store.Done) // pending: qs, from memory
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(qs))
	for i, q := range qs {
		index[q.Name] = i
	}
	for _, c := range counts {
		if c.Dead == 0 && c.Done == 0 {
			continue
		}
		i, ok := index[c.Queue]
		if !ok {
			i = len(qs)
			qs = append(qs, QueueInfo{Name: c.Queue})
		}
		qs[i].Dead, qs[i].Done = c.Dead, c.Done
	}
	sort.Slice(qs, func(i, k int) bool { return qs[i].Name < qs[k].Name })
	return qs, nil
}

// pageLimit reads a listing's limit (default 100, at most 10,000); a bad
// one is answered 400.
func pageLimit(w http.ResponseWriter, q url.Values) (int, bool) {
	n, err := parseLimit(q.Get("limit"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return 0, false
	}
	return n, true
}

// parseLimit reads a listing's limit: 100 when v is empty, at most 10,000.
func parseLimit(v string) (int, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 10000 {
		return 0, fmt.Errorf("%w: limit %q: want 1 to 10000", store.ErrBadFilter, v)
	}
	return n, nil
}

// listJobs pages through stored jobs; state inflight lists the held ones.
func (b *Broker) listJobs(w http.ResponseWriter, r *http.Request) {
	f, err := ParseJobFilter(r.URL.Query())
	if err != nil {
		reply(w, nil, err)
		return
	}
	held, err := b.InFlight(r.Context(), f.Queue)
	if err != nil {
		reply(w, nil, err)
		return
	}
	opts := f.ListOptions(time.Now())
	if opts.Limit == 0 {
		opts.Limit = 100
	}
	var page JobPage
	if f.State == "inflight" {
		for id, worker := range held {
			if len(page.Jobs) == opts.Limit {
				break
			}
			if j, err := b.journal.Get(id); err == nil && opts.Matches(j) {
				page.Jobs = append(page.Jobs, NewJobInfo(j, worker, false))
			}
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	p, err := b.journal.List(opts)
	if err != nil {
		reply(w, nil, err)
		return
	}
	for _, j := range p.Jobs {
		page.Jobs = append(page.Jobs, NewJobInfo(j, held[j.MsgID], false))
	}
	page.Next = p.Next
	writeJSON(w, http.StatusOK, page)
}

type apiError struct {
	Error string `json:"error"`
}

// reply writes v, or err with the status that fits it.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeJSON(w, errorStatus(err), apiError{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// errorStatus is the HTTP status of an error class: the caller's mistake
// (4xx) or the broker's trouble (5xx), never one for the other.
func errorStatus(err error) int {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrWrongState):
		return http.StatusConflict
	case errors.Is(err, store.ErrBadFilter), errors.Is(err, store.ErrInvalidJob), errors.Is(err, store.ErrTooLarge):
		return http.StatusBadRequest
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, ErrStopped), errors.Is(err, errDraining), errors.Is(err, store.ErrClosed), errors.Is(err, store.ErrFenced), errors.Is(err, store.ErrReadOnly),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // I/O, a damaged record: the journal's trouble
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
