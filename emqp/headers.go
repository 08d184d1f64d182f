package emqp

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Known header names.
const (
	HeaderReplyRequested = "reply-requested"
	HeaderGuarantee      = "guarantee"
	HeaderRetryCount     = "retry-count"
	HeaderTimeout        = "timeout"
	HeaderNoHaste        = "nohaste"
	HeaderRunCount       = "run_count"
	HeaderDelay          = "delay"
	HeaderPriority       = "priority"    // 0 to 65535, lower runs first; DefaultPriority when absent
	HeaderUnique         = "unique"      // a key no other live job of the queue may hold
	HeaderUniqueFor      = "unique-for"  // seconds the key stays held after the job is done
	HeaderTenant         = "tenant"      // NAME: whose job it is; a queue's tenants are served in turn
	HeaderLimit          = "limit"       // NAME[;NAME...]: named limiters that must all have room
	HeaderKeepResult     = "keep-result" // seconds the job's result is kept once it is done (at least; retain-done may keep it longer)

	// Of schedules kept by the broker.
	HeaderScheduleID = "schedule-id" // names a schedule whose payload is not EventMQ's
	HeaderTZ         = "tz"          // the Area/City of a cron expression
	HeaderMisfire    = "misfire"     // misfire:skip: no catch-up fire

	// Workflows: a job that waits for others, and batches of jobs.
	HeaderAfter       = "after"        // MSGID[;MSGID...]: runs once every one of them is done
	HeaderAfterBatch  = "after-batch"  // NAME: runs once the batch is complete
	HeaderAfterFailed = "after-failed" // cancel (default) or run: what a parent's death does to the job
	HeaderBatch       = "batch"        // NAME: the job belongs to the batch
	HeaderBatchOpen   = "batch-open"   // flag: the batch stays open (more jobs come) after this one joins

	// W3C Trace Context: the trace a job belongs to (internal/jobtrace).
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Header is one header item. A flag (such as reply-requested) has an empty
// Value.
type Header struct {
	Name  string
	Value string
}

// Headers is the headers frame of a REQUEST or SCHEDULE. It keeps the wire
// text and reads items from it on demand, so decoding a message costs no
// allocation for its headers. The zero value means no headers.
//
// On the wire, headers are comma-separated items `name` or `name:value`
// (EventMQ's form), or a JSON object of the same (a value of true is a flag,
// false or null leaves the item out). Headers that can be written in the
// comma form always are; the JSON form is kept only for names or values the
// comma form cannot hold (a comma, a colon in a name, outer spaces).
//
// Items are unordered in meaning; when a name repeats, the last one counts.
// Unknown names are kept and passed on.
type Headers struct {
	s string
}

// ParseHeaders reads a headers frame. It fails (class ErrHeaders) on text
// that is not UTF-8, JSON that is not an object of strings, numbers and
// booleans, and an item with a colon but no name.
func ParseHeaders(s string) (Headers, error) {
	if !utf8.ValidString(s) {
		return Headers{}, errorf(ErrHeaders, "", "", "headers are not valid UTF-8 text")
	}
	if isJSON(s) {
		items, err := parseJSONHeaders(s)
		if err != nil {
			return Headers{}, err
		}
		return HeadersFrom(items...), nil
	}
	if i := namelessItem(s); i >= 0 {
		return Headers{}, errorf(ErrHeaders, "", "", "header item %d has a colon but no name", i+1)
	}
	return Headers{s: s}, nil
}

// HeadersFrom builds headers from items; a later item replaces an earlier
// one of the same name. Items with an empty name are left out.
func HeadersFrom(items ...Header) Headers {
	items = dedupe(items)
	if len(items) == 0 {
		return Headers{}
	}
	csv := true
	for _, it := range items {
		if !csvSafe(it) {
			csv = false
			break
		}
	}
	var b strings.Builder
	if csv {
		for i, it := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(it.Name)
			if it.Value != "" {
				b.WriteByte(':')
				b.WriteString(it.Value)
			}
		}
		return Headers{s: b.String()}
	}
	b.WriteByte('{')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(it.Name)
		b.Write(k)
		b.WriteByte(':')
		if it.Value == "" {
			b.WriteString("true")
		} else {
			v, _ := json.Marshal(it.Value)
			b.Write(v)
		}
	}
	b.WriteByte('}')
	return Headers{s: b.String()}
}

// String returns the wire form.
func (h Headers) String() string { return h.s }

// IsZero reports whether there are no headers at all.
func (h Headers) IsZero() bool { return h.s == "" }

// Get returns the value of the named header and whether it is present.
func (h Headers) Get(name string) (value string, ok bool) {
	h.each(func(n, v string) bool {
		if n == name {
			value, ok = v, true
		}
		return true
	})
	return value, ok
}

// Has reports whether the named header is present.
func (h Headers) Has(name string) bool {
	_, ok := h.Get(name)
	return ok
}

// Set returns headers with name set to value (a flag when value is empty).
func (h Headers) Set(name, value string) Headers {
	v, ok := h.Get(name)
	switch {
	case ok && v == value && !isJSON(h.s):
		return h
	case !ok && !isJSON(h.s) && csvSafe(Header{name, value}) && name != "":
		// Added to the comma form as it is: the broker does this for
		// every job it forwards (reply-requested), so it is one string.
		item := name
		if value != "" {
			item = name + ":" + value
		}
		if strings.TrimSpace(h.s) == "" {
			return Headers{s: item}
		}
		return Headers{s: h.s + "," + item}
	}
	return HeadersFrom(append(h.Items(), Header{name, value})...)
}

// Del returns headers without the named item.
func (h Headers) Del(name string) Headers {
	if !h.Has(name) {
		return h
	}
	items := h.Items()
	kept := items[:0]
	for _, it := range items {
		if it.Name != name {
			kept = append(kept, it)
		}
	}
	return HeadersFrom(kept...)
}

// Items returns every item in order, each name once (the last one counts).
func (h Headers) Items() []Header {
	var items []Header
	h.each(func(n, v string) bool {
		items = append(items, Header{n, v})
		return true
	})
	return dedupe(items)
}

// Map returns the items as a map.
func (h Headers) Map() map[string]string {
	m := make(map[string]string)
	h.each(func(n, v string) bool {
		m[n] = v
		return true
	})
	return m
}

// ReplyRequested reports whether the sender wants the job's REPLY.
func (h Headers) ReplyRequested() bool { return h.Has(HeaderReplyRequested) }

// Guarantee reports the EventMQ guarantee flag (every EMQ job is durable anyway).
func (h Headers) Guarantee() bool { return h.Has(HeaderGuarantee) }

// NoHaste reports the nohaste flag: a schedule's first run waits one interval.
func (h Headers) NoHaste() bool { return h.Has(HeaderNoHaste) }

// Timeout returns the job's timeout; 0 means none.
func (h Headers) Timeout() (time.Duration, error) { return h.seconds(HeaderTimeout) }

// Delay returns how long to hold the job before it may run; 0 means none.
func (h Headers) Delay() (time.Duration, error) { return h.seconds(HeaderDelay) }

// KeepResult returns how long the job's result is to be kept once it is
// done; 0 means as the broker's retain-done says.
func (h Headers) KeepResult() (time.Duration, error) { return h.seconds(HeaderKeepResult) }

// RetryCount returns how many times a failed job may be retried, or def
// when the header is absent.
func (h Headers) RetryCount(def int) (int, error) {
	n, ok, err := h.count(HeaderRetryCount)
	if !ok && err == nil {
		return def, nil
	}
	return n, err
}

// RunCount returns how many times a schedule runs; 0 means without end.
func (h Headers) RunCount() (int, error) {
	n, _, err := h.count(HeaderRunCount)
	return n, err
}

// DefaultPriority is a job's priority without the priority header
// (beanstalkd's default); lower runs first.
const DefaultPriority = 1024

// MaxUniqueLen bounds a unique key, in bytes.
const MaxUniqueLen = 255

// Priority returns the job's priority: 0 to 65535, lower first.
func (h Headers) Priority() (uint16, error) {
	v, ok := h.Get(HeaderPriority)
	if !ok {
		return DefaultPriority, nil
	}
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil {
		return 0, errorf(ErrHeaders, "", "", "header %s: %q is not a whole number from 0 to 65535", HeaderPriority, v)
	}
	return uint16(n), nil
}

// Unique returns the job's unique key ("" = none) and how long it stays
// held after the job is done.
func (h Headers) Unique() (key string, hold time.Duration, err error) {
	key, ok := h.Get(HeaderUnique)
	switch {
	case ok && key == "":
		return "", 0, errorf(ErrHeaders, "", "", "header %s: the key is empty", HeaderUnique)
	case len(key) > MaxUniqueLen:
		return "", 0, errorf(ErrHeaders, "", "", "header %s: the key is %d bytes, over the limit of %d", HeaderUnique, len(key), MaxUniqueLen)
	}
	v, ok := h.Get(HeaderUniqueFor)
	if !ok {
		return key, 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	switch {
	case err != nil:
		return "", 0, errorf(ErrHeaders, "", "", "header %s: %q is not a whole number of seconds from 0 to %d", HeaderUniqueFor, v, uint32(math.MaxUint32))
	case key == "":
		return "", 0, errorf(ErrHeaders, "", "", "header %s needs header %s", HeaderUniqueFor, HeaderUnique)
	}
	return key, time.Duration(n) * time.Second, nil
}

// MaxTenantLen bounds a tenant's name, in bytes.
const MaxTenantLen = 255

// Tenant returns the job's tenant: "" without the header, else 1 to
// MaxTenantLen bytes.
func (h Headers) Tenant() (string, error) {
	v, ok := h.Get(HeaderTenant)
	if ok && (v == "" || len(v) > MaxTenantLen) {
		return "", errorf(ErrHeaders, "", "", "header %s: the name must be 1 to %d bytes, got %d", HeaderTenant, MaxTenantLen, len(v))
	}
	return v, nil
}

// Limits of the header limit.
const (
	MaxLimits     = 4   // limiters one job may name
	MaxLimiterLen = 255 // bytes of a limiter's name
)

// Limits returns the named limiters the job needs room in (none without
// the header), each once, in the order given.
func (h Headers) Limits() ([]string, error) {
	v, ok := h.Get(HeaderLimit)
	if !ok {
		return nil, nil
	}
	var names []string
	for name := range strings.SplitSeq(v, ";") {
		if name == "" || len(name) > MaxLimiterLen {
			return nil, errorf(ErrHeaders, "", "", "header %s: each name must be 1 to %d bytes, separated by ;", HeaderLimit, MaxLimiterLen)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) > MaxLimits {
		return nil, errorf(ErrHeaders, "", "", "header %s: %d limiters, over the limit of %d", HeaderLimit, len(names), MaxLimits)
	}
	return names, nil
}

// MaxAfter bounds the jobs one job may wait for (header after).
const MaxAfter = 1000

// MaxBatchLen bounds a batch's name, in bytes.
const MaxBatchLen = 255

// Workflow is what a job's workflow headers say: the jobs it waits for
// (after, each once, in order), the batch it waits for (after-batch),
// whether it runs when one of them dies or is cancelled (after-failed:
// run), the batch it belongs to (batch) and whether that batch stays
// open (batch-open). The zero value: none of them.
type Workflow struct {
	After       []string
	AfterBatch  string
	RunIfFailed bool
	Batch       string
	BatchOpen   bool
}

// Waits reports whether the job waits for other jobs or a batch.
func (w Workflow) Waits() bool { return len(w.After) > 0 || w.AfterBatch != "" }

// Workflow reads the workflow headers; a bad value is an error naming
// its header.
func (h Headers) Workflow() (Workflow, error) {
	var w Workflow
	if v, ok := h.Get(HeaderAfter); ok {
		seen := make(map[string]bool)
		for _, id := range strings.Split(v, ";") {
			switch {
			case id == "" || len(id) > MaxIDLen:
				return Workflow{}, errorf(ErrHeaders, "", "", "header %s: each msgid must be 1 to %d bytes, separated by ;", HeaderAfter, MaxIDLen)
			case !seen[id]:
				seen[id] = true
				w.After = append(w.After, id)
			}
		}
		if len(w.After) > MaxAfter {
			return Workflow{}, errorf(ErrHeaders, "", "", "header %s: %d msgids, over the limit of %d", HeaderAfter, len(w.After), MaxAfter)
		}
	}
	var err error
	if w.AfterBatch, err = batchName(h, HeaderAfterBatch); err != nil {
		return Workflow{}, err
	}
	if w.Batch, err = batchName(h, HeaderBatch); err != nil {
		return Workflow{}, err
	}
	if v, ok := h.Get(HeaderAfterFailed); ok {
		switch v {
		case "cancel":
		case "run":
			w.RunIfFailed = true
		default:
			return Workflow{}, errorf(ErrHeaders, "", "", "header %s: %q is not cancel or run", HeaderAfterFailed, v)
		}
		if !w.Waits() {
			return Workflow{}, errorf(ErrHeaders, "", "", "header %s needs header %s or %s", HeaderAfterFailed, HeaderAfter, HeaderAfterBatch)
		}
	}
	if w.BatchOpen = h.Has(HeaderBatchOpen); w.BatchOpen && w.Batch == "" {
		return Workflow{}, errorf(ErrHeaders, "", "", "header %s needs header %s", HeaderBatchOpen, HeaderBatch)
	}
	return w, nil
}

func batchName(h Headers, header string) (string, error) {
	v, ok := h.Get(header)
	switch {
	case !ok:
		return "", nil
	case v == "" || len(v) > MaxBatchLen:
		return "", errorf(ErrHeaders, "", "", "header %s: the batch name must be 1 to %d bytes", header, MaxBatchLen)
	}
	return v, nil
}

// DuplicateHolder reads the msgid of the job holding a unique key from
// the text of an ERROR duplicate ("", false when it names none).
func DuplicateHolder(text string) (string, bool) {
	i := strings.LastIndex(text, duplicateMark)
	if i < 0 {
		return "", false
	}
	id := text[i+len(duplicateMark):]
	return id, id != "" && len(id) <= MaxIDLen
}

// DuplicateText is the text of an ERROR duplicate.
func DuplicateText(queue, key, holder string) string {
	return "queue " + strconv.Quote(queue) + ": unique key " + strconv.Quote(key) + duplicateMark + holder
}

const duplicateMark = " is held by job "

// splitProgress reads a PROGRESS text: a number from 0 to 100 first, if
// any, then the note.
func splitProgress(s string) (percent int, note string, ok bool) {
	word, rest, _ := strings.Cut(s, " ")
	n, err := strconv.Atoi(word)
	if err != nil || n < 0 || n > 100 || word != strconv.Itoa(n) {
		return 0, s, false
	}
	return n, strings.TrimSpace(rest), true
}

func (h Headers) count(name string) (int, bool, error) {
	v, ok := h.Get(name)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, true, errorf(ErrHeaders, "", "", "header %s: %s is not a whole number >= 0", name, QuoteName(v))
	}
	return n, true, nil
}

func (h Headers) seconds(name string) (time.Duration, error) {
	v, ok := h.Get(name)
	if !ok {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f > maxSeconds {
		return 0, errorf(ErrHeaders, "", "", "header %s: %s is not a number of seconds >= 0", name, QuoteName(v))
	}
	return time.Duration(f * float64(time.Second)), nil
}

// maxSeconds keeps a duration in seconds within time.Duration (about 292 years).
const maxSeconds = float64(math.MaxInt64 / int64(time.Second))

// each calls fn for every item in wire order until fn returns false.
func (h Headers) each(fn func(name, value string) bool) {
	if isJSON(h.s) {
		items, _ := parseJSONHeaders(h.s) // validated when h was made
		for _, it := range items {
			if !fn(it.Name, it.Value) {
				return
			}
		}
		return
	}
	eachCSV(h.s, fn)
}

func isJSON(s string) bool { return strings.HasPrefix(s, "{") }

// eachCSV calls fn for every non-empty item of a comma-separated header frame.
func eachCSV(s string, fn func(name, value string) bool) {
	for s != "" {
		var name, value string
		name, value, s = nextCSV(s)
		if name != "" && !fn(name, value) {
			return
		}
	}
}

// namelessItem returns the index of the first comma-separated item that
// has a colon but no name (":5", ":"), or -1. It jumps from colon to comma
// with IndexByte, since every REQUEST's headers go through it.
func namelessItem(s string) int {
	for start := 0; ; {
		c := strings.IndexByte(s[start:], ':')
		if c < 0 {
			return -1
		}
		c += start
		item := strings.LastIndexByte(s[:c], ',') + 1 // the colon's item starts here
		if strings.TrimSpace(s[item:c]) == "" {
			return strings.Count(s[:item], ",")
		}
		next := strings.IndexByte(s[c:], ',')
		if next < 0 {
			return -1
		}
		start = c + next + 1
	}
}

// nextCSV splits the first item off a comma-separated header frame; an
// empty item gives an empty name and value.
func nextCSV(s string) (name, value, rest string) {
	item := s
	if i := strings.IndexByte(s, ','); i >= 0 {
		item, rest = s[:i], s[i+1:]
	}
	name, value, _ = strings.Cut(item, ":")
	return strings.TrimSpace(name), strings.TrimSpace(value), rest
}

// parseJSONHeaders reads a JSON object of strings, numbers and booleans, in
// key order.
func parseJSONHeaders(s string) ([]Header, error) {
	bad := func(why string) error {
		return errorf(ErrHeaders, "", "", "headers are not a JSON object of strings, numbers and booleans: %s", why)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, bad("it does not start with an object")
	}
	var items []Header
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, bad(err.Error())
		}
		name, _ := t.(string)
		if name == "" {
			return nil, bad("a key is empty")
		}
		t, err = dec.Token()
		if err != nil {
			return nil, bad(err.Error())
		}
		switch v := t.(type) {
		case string:
			items = append(items, Header{name, v})
		case json.Number:
			items = append(items, Header{name, v.String()})
		case bool:
			if v {
				items = append(items, Header{name, ""})
			}
		case nil:
		default:
			return nil, bad("the value of " + strconv.Quote(name) + " is a list or an object")
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, bad("the object is not closed")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bad("there is more after the object")
	}
	return dedupe(items), nil
}

// dedupe drops items without a name and keeps the last of each name, in
// the position of its first appearance. It is linear, so a frame of many
// items costs no more than its size.
func dedupe(items []Header) []Header {
	out := items[:0:0]
	var at map[string]int // name -> index in out; made only past a few items
	for _, it := range items {
		if it.Name == "" {
			continue
		}
		i := -1
		if at != nil {
			if j, ok := at[it.Name]; ok {
				i = j
			}
		} else {
			for j := range out {
				if out[j].Name == it.Name {
					i = j
					break
				}
			}
		}
		if i >= 0 {
			out[i].Value = it.Value
			continue
		}
		out = append(out, it)
		if at == nil && len(out) > 8 {
			at = make(map[string]int, len(items))
			for j, o := range out {
				at[o.Name] = j
			}
		} else if at != nil {
			at[it.Name] = len(out) - 1
		}
	}
	return out
}

// csvSafe reports whether an item reads back the same from the comma form.
func csvSafe(it Header) bool {
	n, v := it.Name, it.Value
	return !strings.ContainsAny(n, ",:") && !strings.HasPrefix(n, "{") &&
		strings.TrimSpace(n) == n && !strings.Contains(v, ",") && strings.TrimSpace(v) == v
}
