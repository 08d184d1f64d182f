package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// The HTTP job API, for programs that do not speak ZeroMQ (docs/http.md):
//
//	POST /api/v1/queues/{queue}/jobs   one job, or a bulk of them
//	GET  /api/v1/jobs/{msgid}/result?wait=30s   the job's REPLY, waited for
//
// A job goes through the broker's own REQUEST path (broker.Enqueue): the
// same checks, unique keys, limits and max-pending, and 201 only once the
// journal's write is durable, when an eMQP client would get its ACK. A
// bulk is one BULK (broker.EnqueueBulk): all stored in one write, or none.
// The Idempotency-Key header is the job's msgid (a bulk's: its jobs
// without one are KEY/0, KEY/1, ...): the same key sent again is answered
// as a resent REQUEST is, stored once.
//
// A job sent here keeps its result KeepResult long (header keep-result)
// unless it says otherwise, so that its sender can fetch it; results stay
// in the journal, not in memory. A result request waits at most
// MaxResultWait, and at most MaxResultWaits of them wait at once.

// IdempotencyKey is the request header whose value becomes the msgid.
const IdempotencyKey = "Idempotency-Key"

// MaxResultWait bounds a result request's wait.
const MaxResultWait = 60 * time.Second

// MaxKeepResult bounds a job's keep_result.
const MaxKeepResult = 7 * 24 * time.Hour

// JobSpec is one job as the HTTP job API takes it in JSON. Payload is a
// JSON value: a string is sent as its text, anything else as its JSON.
// Headers is a JSON object of headers (as a REQUEST's JSON headers
// frame) or their comma form; the other fields are the headers of
// docs/protocol.md by a JSON name, each given once.
type JobSpec struct {
	MsgID         string          `json:"msgid,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	Headers       json.RawMessage `json:"headers,omitempty"`

	Delay       *Seconds  `json:"delay,omitempty"` // "10s", or a number of seconds
	RunAt       time.Time `json:"run_at,omitzero"` // RFC 3339; the same as the delay until then
	Priority    *int      `json:"priority,omitempty"`
	Tenant      string    `json:"tenant,omitempty"`
	Unique      string    `json:"unique,omitempty"`
	UniqueFor   *Seconds  `json:"unique_for,omitempty"`
	Limit       []string  `json:"limit,omitempty"`
	Retry       *int      `json:"retry,omitempty"` // retry-count
	Timeout     *Seconds  `json:"timeout,omitempty"`
	After       []string  `json:"after,omitempty"`
	AfterBatch  string    `json:"after_batch,omitempty"`
	AfterFailed string    `json:"after_failed,omitempty"`
	Batch       string    `json:"batch,omitempty"`
	BatchOpen   bool      `json:"batch_open,omitempty"`
	KeepResult  *Seconds  `json:"keep_result,omitempty"` // default: the listener's KeepResult
}

// Seconds is a duration in JSON: a Go duration ("1m30s") or a number of
// seconds.
type Seconds time.Duration

// UnmarshalJSON reads "10s" or 10.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var text string
	if json.Unmarshal(b, &text) == nil {
		d, err := parseSeconds(text)
		*s = Seconds(d)
		return err
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil || f < 0 || f > math.MaxInt64/float64(time.Second) {
		return fmt.Errorf("%s is not a duration (\"10s\") or a number of seconds >= 0", b)
	}
	*s = Seconds(f * float64(time.Second))
	return nil
}

// parseSeconds reads a duration: "1m30s", or a number of seconds.
func parseSeconds(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > math.MaxInt64/float64(time.Second) || math.IsNaN(f) {
			return 0, fmt.Errorf("%q is not a number of seconds >= 0", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (\"10s\", \"1m30s\") or a number of seconds >= 0", s)
	}
	return d, nil
}

// secs is d as a header's seconds.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// badJob is a job the API refuses before the broker sees it.
type badJob struct{ text string }

func (e *badJob) Error() string { return e.text }

func bad(format string, args ...any) error { return &badJob{fmt.Sprintf(format, args...)} }

// job reads sp as a job's headers and payload; keep is the listener's
// KeepResult, for a job that names none.
func (sp *JobSpec) job(keep time.Duration) (emqp.Headers, []byte, error) {
	var h emqp.Headers
	if raw := bytes.TrimSpace(sp.Headers); len(raw) > 0 && string(raw) != "null" {
		text := string(raw)
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &text); err != nil {
				return h, nil, bad("headers: %v", err)
			}
		}
		var err error
		if h, err = emqp.ParseHeaders(text); err != nil {
			return h, nil, bad("headers: %v", err)
		}
	}
	var err error
	set := func(field, name, value string) {
		if err != nil {
			return
		}
		if _, ok := h.Get(name); ok {
			err = bad("%s: header %s is given in headers too; give it once", field, name)
			return
		}
		h = h.Set(name, value)
	}
	if sp.Delay != nil && !sp.RunAt.IsZero() {
		return h, nil, bad("delay and run_at: give one")
	}
	if sp.Delay != nil {
		set("delay", emqp.HeaderDelay, secs(time.Duration(*sp.Delay)))
	}
	if !sp.RunAt.IsZero() {
		set("run_at", emqp.HeaderDelay, secs(max(time.Until(sp.RunAt), 0)))
	}
	if sp.Priority != nil {
		set("priority", emqp.HeaderPriority, strconv.Itoa(*sp.Priority))
	}
	if sp.Tenant != "" {
		set("tenant", emqp.HeaderTenant, sp.Tenant)
	}
	if sp.Unique != "" {
		set("unique", emqp.HeaderUnique, sp.Unique)
	}
	if sp.UniqueFor != nil {
		set("unique_for", emqp.HeaderUniqueFor, strconv.FormatInt(int64(time.Duration(*sp.UniqueFor)/time.Second), 10))
	}
	if len(sp.Limit) > 0 {
		set("limit", emqp.HeaderLimit, strings.Join(sp.Limit, ";"))
	}
	if sp.Retry != nil {
		set("retry", emqp.HeaderRetryCount, strconv.Itoa(*sp.Retry))
	}
	if sp.Timeout != nil {
		set("timeout", emqp.HeaderTimeout, secs(time.Duration(*sp.Timeout)))
	}
	if len(sp.After) > 0 {
		set("after", emqp.HeaderAfter, strings.Join(sp.After, ";"))
	}
	if sp.AfterBatch != "" {
		set("after_batch", emqp.HeaderAfterBatch, sp.AfterBatch)
	}
	if sp.AfterFailed != "" {
		set("after_failed", emqp.HeaderAfterFailed, sp.AfterFailed)
	}
	if sp.Batch != "" {
		set("batch", emqp.HeaderBatch, sp.Batch)
	}
	if sp.BatchOpen {
		set("batch_open", emqp.HeaderBatchOpen, "")
	}
	if sp.KeepResult != nil {
		if time.Duration(*sp.KeepResult) > MaxKeepResult {
			return h, nil, bad("keep_result: %v is over the limit of %v", time.Duration(*sp.KeepResult), MaxKeepResult)
		}
		set("keep_result", emqp.HeaderKeepResult, secs(time.Duration(*sp.KeepResult)))
	} else if _, ok := h.Get(emqp.HeaderKeepResult); !ok && keep > 0 {
		h = h.Set(emqp.HeaderKeepResult, secs(keep))
	}
	if err != nil {
		return h, nil, err
	}
	payload, err := sp.payload()
	return h, payload, err
}

func (sp *JobSpec) payload() ([]byte, error) {
	raw := bytes.TrimSpace(sp.Payload)
	switch {
	case len(raw) > 0 && sp.PayloadBase64 != "":
		return nil, bad("payload and payload_base64: give one")
	case sp.PayloadBase64 != "":
		p, err := base64.StdEncoding.DecodeString(sp.PayloadBase64)
		if err != nil {
			return nil, bad("payload_base64: %v", err)
		}
		return p, nil
	case len(raw) == 0 || string(raw) == "null":
		return nil, nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, bad("payload: %v", err)
		}
		return []byte(s), nil
	}
	return raw, nil
}

// decodeSpec reads one JobSpec, refusing fields it does not know.
func decodeSpec(raw []byte) (JobSpec, error) {
	var sp JobSpec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return sp, bad("%v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return sp, bad("more than one JSON value")
	}
	return sp, nil
}

// Raw bodies' query parameters, the JobSpec fields of the same names.
var rawParams = map[string]bool{"msgid": true, "headers": true, "delay": true, "run_at": true, "priority": true,
	"tenant": true, "unique": true, "unique_for": true, "limit": true, "retry": true, "timeout": true, "after": true,
	"after_batch": true, "after_failed": true, "batch": true, "batch_open": true, "keep_result": true}

// specOfQuery reads a raw body's query parameters as a JobSpec.
func specOfQuery(q url.Values) (JobSpec, error) {
	var sp JobSpec
	for name, vs := range q {
		if !rawParams[name] {
			return sp, bad("unknown query parameter %q (the job's fields: msgid, headers, delay, run_at, priority, tenant, unique, unique_for, limit, retry, timeout, after, after_batch, after_failed, batch, batch_open, keep_result)", name)
		}
		if len(vs) > 1 && name != "limit" && name != "after" {
			return sp, bad("query parameter %s is given %d times", name, len(vs))
		}
	}
	var err error
	dur := func(name string) *Seconds {
		v := q.Get(name)
		if v == "" || err != nil {
			return nil
		}
		d, e := parseSeconds(v)
		if e != nil {
			err = bad("%s: %v", name, e)
		}
		s := Seconds(d)
		return &s
	}
	num := func(name string) *int {
		v := q.Get(name)
		if v == "" || err != nil {
			return nil
		}
		n, e := strconv.Atoi(v)
		if e != nil {
			err = bad("%s: %q is not a whole number", name, v)
		}
		return &n
	}
	list := func(name string) []string {
		var out []string
		for _, v := range q[name] {
			out = append(out, strings.Split(v, ";")...)
		}
		return out
	}
	sp.MsgID = q.Get("msgid")
	if h := q.Get("headers"); h != "" {
		sp.Headers, _ = json.Marshal(h)
	}
	sp.Delay, sp.UniqueFor, sp.Timeout, sp.KeepResult = dur("delay"), dur("unique_for"), dur("timeout"), dur("keep_result")
	sp.Priority, sp.Retry = num("priority"), num("retry")
	sp.Tenant, sp.Unique, sp.Limit, sp.After = q.Get("tenant"), q.Get("unique"), list("limit"), list("after")
	sp.AfterBatch, sp.AfterFailed, sp.Batch = q.Get("after_batch"), q.Get("after_failed"), q.Get("batch")
	if v := q.Get("run_at"); v != "" && err == nil {
		if sp.RunAt, err = time.Parse(time.RFC3339, v); err != nil {
			err = bad("run_at: %q is not an RFC 3339 time (2026-01-02T15:04:05Z)", v)
		}
	}
	if v := q.Get("batch_open"); v != "" && err == nil {
		if sp.BatchOpen, err = strconv.ParseBool(v); err != nil {
			err = bad("batch_open: %q is not true or false", v)
		}
	}
	return sp, err
}

// Enqueued is the answer to a job, or a bulk, stored.
type Enqueued struct {
	MsgID  string   `json:"msgid,omitempty"`  // one job's
	MsgIDs []string `json:"msgids,omitempty"` // a bulk's, in its order
}

// refusal is a refused job's answer: the API's error, and for a bulk
// which job; for a duplicate, the job that holds the key.
type refusal struct {
	apiError
	Index  *int   `json:"index,omitempty"`
	MsgID  string `json:"msgid,omitempty"`
	Holder string `json:"holder,omitempty"`
}

// postJobs: POST /api/v1/queues/{queue}/jobs.
func (s *Server) postJobs(w http.ResponseWriter, r *http.Request) {
	t := s.serving(w)
	if t == nil {
		return
	}
	queue := r.PathValue("queue")
	key := r.Header.Get(IdempotencyKey)
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Header.Get("Content-Type") == "" {
		mt, err = "application/octet-stream", nil
	}
	if err != nil {
		refuse(w, http.StatusUnsupportedMediaType, "invalid", "Content-Type: "+err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		refuse(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes (admin max body): %v", s.opts.MaxBodyBytes, err))
		return
	}
	var specs []JobSpec
	var payloads [][]byte // raw bodies' own
	bulk := false
	switch mt {
	case "application/octet-stream":
		sp, err := specOfQuery(r.URL.Query())
		if err != nil {
			s.refuseJob(w, err, -1, "")
			return
		}
		specs, payloads = []JobSpec{sp}, [][]byte{body}
	case "application/json", "application/x-ndjson":
		if len(r.URL.Query()) > 0 {
			refuse(w, http.StatusBadRequest, "invalid", "a JSON body holds the job's fields: no query parameters")
			return
		}
		var raws [][]byte
		if raws, bulk, err = splitJobs(body, mt == "application/x-ndjson"); err != nil {
			s.refuseJob(w, err, -1, "")
			return
		}
		for i, raw := range raws {
			sp, err := decodeSpec(raw)
			if err != nil {
				s.refuseJob(w, err, index(bulk, i), "")
				return
			}
			specs = append(specs, sp)
		}
	default:
		refuse(w, http.StatusUnsupportedMediaType, "invalid", fmt.Sprintf("Content-Type %s: want application/octet-stream (the payload; the job's fields as query parameters), application/json (a job, or an array of jobs) or application/x-ndjson (a job a line)", mt))
		return
	}
	producer := s.authNeeded() && s.requestAccess(r) == producerAccess
	jobs := make([]emqp.BulkJob, len(specs))
	for i := range specs {
		sp := &specs[i]
		h, payload, err := sp.job(s.opts.KeepResult)
		if producer {
			h = h.Set(ProducerHeader, "1")
		}
		if err == nil {
			jobs[i], err = jobID(sp.MsgID, key, i, bulk)
		}
		if err != nil {
			s.refuseJob(w, err, index(bulk, i), sp.MsgID)
			return
		}
		if payloads != nil {
			payload = payloads[i]
		}
		jobs[i].Queue, jobs[i].Headers, jobs[i].Payload = queue, h, payload
	}
	if !bulk {
		j := jobs[0]
		if err := t.b.Enqueue(r.Context(), queue, j.MsgID, j.Headers, j.Payload); err != nil {
			s.refuseJob(w, err, -1, "")
			return
		}
		w.Header().Set("Location", "/api/v1/jobs/"+url.PathEscape(j.MsgID))
		writeJSON(w, http.StatusCreated, Enqueued{MsgID: j.MsgID})
		return
	}
	id := key
	if id == "" {
		id = emqp.NewID()
	}
	if err := t.b.EnqueueBulk(r.Context(), id, jobs); err != nil {
		s.refuseJob(w, err, -1, "")
		return
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.MsgID
	}
	writeJSON(w, http.StatusCreated, Enqueued{MsgIDs: ids})
}

// index is job i's index in the answer: -1 for one job alone.
func index(bulk bool, i int) int {
	if bulk {
		return i
	}
	return -1
}

// splitJobs cuts a JSON body into its jobs: an object is one job, an
// array (or JSON lines) a bulk.
func splitJobs(body []byte, lines bool) (raws [][]byte, bulk bool, err error) {
	if lines {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(nil, len(body)+1)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				raws = append(raws, line)
			}
		}
		if len(raws) == 0 {
			return nil, true, bad("no job: want a JSON object a line")
		}
		return raws, true, nil
	}
	body = bytes.TrimSpace(body)
	switch {
	case len(body) > 0 && body[0] == '{':
		return [][]byte{body}, false, nil
	case len(body) > 0 && body[0] == '[':
		var arr []json.RawMessage
		if err := json.Unmarshal(body, &arr); err != nil {
			return nil, true, bad("the body is not a JSON array of jobs: %v", strings.TrimPrefix(err.Error(), "json: "))
		}
		if len(arr) == 0 {
			return nil, true, bad("no job: the array is empty")
		}
		for _, a := range arr {
			raws = append(raws, a)
		}
		return raws, true, nil
	}
	return nil, false, bad("the body is not a job in JSON: want an object, or an array of them")
}

// jobID is a job's msgid: its own, else the Idempotency-Key's (KEY/i in
// a bulk), else a new one.
func jobID(own, key string, i int, bulk bool) (emqp.BulkJob, error) {
	id := own
	switch {
	case own != "" && key != "" && !bulk && own != key:
		return emqp.BulkJob{}, bad("msgid %q and %s %q differ: give one", own, IdempotencyKey, key)
	case own != "":
	case key != "" && bulk:
		id = key + "/" + strconv.Itoa(i)
	case key != "":
		id = key
	default:
		id = emqp.NewID()
	}
	if id == "" || len(id) > emqp.MaxIDLen {
		return emqp.BulkJob{}, bad("msgid (or %s) must be 1 to %d bytes, got %d", IdempotencyKey, emqp.MaxIDLen, len(id))
	}
	return emqp.BulkJob{MsgID: id}, nil
}

// refuseJob answers a job refused: by this API (400), by the broker (by
// its ERROR's code), or a broker that could not answer.
func (s *Server) refuseJob(w http.ResponseWriter, err error, i int, msgid string) {
	var out refusal
	if i >= 0 {
		out.Index, out.MsgID = &i, msgid
	}
	var bj *badJob
	var rf *broker.Refusal
	status := http.StatusBadRequest
	switch {
	case errors.As(err, &bj):
		out.apiError = apiError{err.Error(), "invalid"}
		if i >= 0 {
			out.Error = emqp.BulkJobText(i, msgid, out.Error)
		}
	case errors.As(err, &rf):
		out.apiError = apiError{rf.Text, rf.Code}
		if n, id, _, ok := emqp.BulkJobOf(rf.Text); ok {
			out.Index, out.MsgID = &n, id
		}
		switch rf.Code {
		case emqp.CodeBadRequest:
		case emqp.CodeTooLarge:
			status = http.StatusRequestEntityTooLarge
		case emqp.CodeDuplicate:
			status = http.StatusConflict
			out.Holder, _ = emqp.DuplicateHolder(rf.Text)
		case emqp.CodeQueueFull:
			status = http.StatusTooManyRequests
			w.Header().Set("Retry-After", "1")
		case emqp.CodeForbidden:
			status = http.StatusForbidden
		default: // unavailable, moved: send it again later (or elsewhere)
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "1")
		}
	default: // stopped, or the request's context: the outcome is unknown
		code, st := classOf(err)
		out.apiError, status = apiError{err.Error() + "; the job may be stored: send it again with the same " + IdempotencyKey, code}, st
		if st == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
	}
	writeJSON(w, status, out)
}

// ErrNotDone is the answer about a result not there yet: the job is
// stored and not done (202 on the wire, with its state).
var ErrNotDone = fmt.Errorf("%w: the job is not done", store.ErrNotFound)

// notDone is the 202 answer: the job and its state now.
type notDone struct {
	apiError
	MsgID string `json:"msgid"`
	State string `json:"state"` // storing, pending, inflight or waiting
}

// getResult: GET /api/v1/jobs/{msgid}/result[?wait=30s]. The result as
// it is stored, else after up to wait (at most MaxResultWait) for the
// job to be over: 200 and the result's bytes; 202 not done yet; 404 no
// such job (or its result's time is up); 409 dead or cancelled; 410 done
// and its result not kept.
func (s *Server) getResult(w http.ResponseWriter, r *http.Request) {
	t := s.current()
	if t == nil {
		s.noBroker(w)
		return
	}
	if !s.showsPayloads(r) && s.requestAccess(r) != producerAccess { // a producer reads its own jobs' (answerResult)
		s.hidePayload(w)
		return
	}
	msgid := r.PathValue("msgid")
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := parseSeconds(v)
		if err != nil {
			refuse(w, http.StatusBadRequest, "invalid", "wait: "+err.Error())
			return
		}
		wait = min(d, MaxResultWait)
	}
	if wait > 0 {
		if s.waits.Add(1) > int64(s.opts.MaxResultWaits) {
			s.waits.Add(-1)
			w.Header().Set("Retry-After", "1")
			refuse(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("%d result requests wait already (admin max result waits); ask again shortly", s.opts.MaxResultWaits))
			return
		}
		defer s.waits.Add(-1)
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	for {
		var jw *broker.JobWait
		if ctx.Err() == nil {
			jw, _ = t.b.AwaitJob(ctx, msgid) // nil when the wait is over: one last look
		}
		held := jw != nil && jw.Held
		if s.answerResult(w, r, t, msgid, held, jw == nil) {
			if jw != nil {
				jw.Close()
			}
			return
		}
		select {
		case <-jw.C:
		case <-ctx.Done():
		}
		jw.Close()
		if r.Context().Err() != nil {
			return // the caller is gone
		}
	}
}

// answerResult answers with what the journal says of msgid when that is
// final (done, dead, cancelled, unknown), or when last; held: the broker
// held the job when the wait began.
func (s *Server) answerResult(w http.ResponseWriter, r *http.Request, t *target, msgid string, held, last bool) bool {
	sj, h, err := t.b.Job(r.Context(), msgid)
	switch {
	case errors.Is(err, store.ErrNotFound) && held: // being stored
		if !last {
			return false
		}
		writeJSON(w, http.StatusAccepted, notDone{apiError{"job " + msgid + " is being stored", "not_done"}, msgid, "storing"})
		return true
	case errors.Is(err, store.ErrNotFound):
		refuse(w, http.StatusNotFound, "not_found", "no job "+msgid+" is stored here: never sent, or done and its result not kept or expired")
		return true
	case err != nil:
		fail(w, err)
		return true
	}
	if s.authNeeded() && s.requestAccess(r) == producerAccess {
		if h, err := emqp.ParseHeaders(sj.Headers); err != nil || !hasHeader(h, ProducerHeader) {
			// Not its job: answered as one it never sent.
			refuse(w, http.StatusNotFound, "not_found", "no job "+msgid+" is stored here: never sent, or done and its result not kept or expired")
			return true
		}
	}
	switch sj.State {
	case store.Done:
		res, err := t.b.Result(msgid)
		switch {
		case errors.Is(err, store.ErrNotFound):
			refuse(w, http.StatusGone, "result_gone", "job "+msgid+" is done; its result was not kept (keep_result, retain-done) or its time is up")
		case err != nil:
			fail(w, err)
		default:
			s.payloadRead(r, sj.Queue, msgid, "result")
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", msgid+".result"))
			w.Header().Set("Content-Length", strconv.Itoa(len(res)))
			_, _ = w.Write(res)
		}
		return true
	case store.Dead:
		refuse(w, http.StatusConflict, "dead", "job "+msgid+" is dead (out of attempts: "+sj.LastError+"); it has no result until an operator retries it")
		return true
	case store.Cancelled:
		refuse(w, http.StatusConflict, "cancelled", "job "+msgid+" was cancelled: it has no result")
		return true
	}
	if !last {
		return false
	}
	state := sj.State.String()
	if h.Worker != "" {
		state = "inflight"
	}
	writeJSON(w, http.StatusAccepted, notDone{apiError{"job " + msgid + " is not done: it is " + state, "not_done"}, msgid, state})
	return true
}

// ProducerHeader marks a job the producer token sent: it may read the
// results of those jobs only (a worker sees the header too).
const ProducerHeader = "sent-by-producer-token"

func hasHeader(h emqp.Headers, name string) bool {
	_, ok := h.Get(name)
	return ok
}

// ResultWaits is how many result requests wait now.
func (s *Server) ResultWaits() int64 { return s.waits.Load() }
