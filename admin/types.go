package admin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/store"
)

// The admin API's answers, as they go on the wire (JSON) and as the API
// returns them.

// JobInfo is a job as the admin API shows it.
type JobInfo struct {
	MsgID       string    `json:"msgid"`
	Queue       string    `json:"queue"`
	State       string    `json:"state"` // waiting, pending, inflight, dead, done or cancelled
	Worker      string    `json:"worker,omitempty"`
	Headers     string    `json:"headers"`
	Priority    int       `json:"priority"`                     // from its headers: 0 to 65535, lower runs first (1024 without one)
	Unique      string    `json:"unique,omitempty"`             // its unique key in the queue ("" = none)
	UniqueFor   int64     `json:"unique_for_seconds,omitempty"` // how long the key stays held after it is done
	Enqueued    time.Time `json:"enqueued"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error,omitempty"`
	NotBefore   time.Time `json:"not_before,omitzero"`
	Finished    time.Time `json:"finished,omitzero"` // done: when its worker replied
	PayloadSize int       `json:"payload_size"`
	Preview     string    `json:"preview"`                  // the payload's first bytes as text; invalid UTF-8 shown as U+FFFD
	Payload     string    `json:"payload_base64,omitempty"` // only when asked for
	Result      *string   `json:"result_base64,omitempty"`  // done: its worker's REPLY, when the payload is asked for
	// PayloadHidden: the caller may not see payloads (payloads.go), so
	// Preview is empty and Payload and Result absent.
	PayloadHidden bool `json:"payload_hidden,omitempty"`
	// Trail is what happened to it, oldest first: received (when it was
	// stored), then the events its trail keeps (store.Job.Trail), then
	// those of the broker not yet written (a delivery under way).
	// Only in the answer about one job, not in listings.
	Trail []store.TrailEvent `json:"trail,omitempty"`
	// Progress is the latest report of the worker running it: only in
	// the answer about one job in flight, from a running broker.
	Progress *broker.Progress `json:"progress,omitempty"`

	// Workflows (workflows.go): the batch it is in, the jobs and the
	// batch it waits for, with after-failed's rule, and while waiting
	// how many it still waits for. Parents' states and Children (the
	// jobs that wait for it) only in the answer about one job.
	Batch       string   `json:"batch,omitempty"`
	After       []Parent `json:"after,omitempty"`
	AfterBatch  string   `json:"after_batch,omitempty"`
	AfterFailed string   `json:"after_failed,omitempty"`
	Waits       int      `json:"waits,omitempty"`
	Children    []string `json:"children,omitempty"`
}

// PreviewLen is how many payload bytes a JobInfo's preview shows.
const PreviewLen = 200

// NewJobInfo describes a stored job; worker is who holds it ("" = nobody).
func NewJobInfo(j *store.Job, worker string, withPayload bool) JobInfo {
	ji := JobInfo{
		MsgID: j.MsgID, Queue: j.Queue, State: j.State.String(), Worker: worker,
		Headers: j.Headers, Enqueued: j.Enqueued, Attempts: j.Attempts, LastError: j.LastError,
		NotBefore: j.NotBefore, Finished: j.Finished, PayloadSize: len(j.Payload),
		Priority: priority(j.Headers), Unique: j.Unique, UniqueFor: int64(j.UniqueFor / time.Second),
	}
	if worker != "" {
		ji.State = "inflight"
	}
	family(&ji, j)
	ji.Preview = preview(j.Payload)
	if withPayload {
		ji.Payload = base64.StdEncoding.EncodeToString(j.Payload)
	}
	return ji
}

// priority is the priority the headers give a job; a header the broker
// could not read (it refused such jobs) counts as the default.
func priority(headers string) int {
	if !strings.Contains(headers, emqp.HeaderPriority) {
		return emqp.DefaultPriority
	}
	h, err := emqp.ParseHeaders(headers)
	if err != nil {
		return emqp.DefaultPriority
	}
	p, err := h.Priority()
	if err != nil {
		return emqp.DefaultPriority
	}
	return int(p)
}

// jobInfoWithTrail is NewJobInfo with the job's trail (received first)
// and, for a done job and withPayload, the result kept for it.
func jobInfoWithTrail(j *store.Job, worker string, withPayload bool, result func(msgid string) ([]byte, error)) JobInfo {
	ji := NewJobInfo(j, worker, withPayload)
	ji.Trail = append([]store.TrailEvent{{Time: j.Enqueued, Kind: broker.EventReceived}}, j.Trail...)
	if j.State == store.Done && withPayload {
		if res, err := result(j.MsgID); err == nil {
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
// object with every counter of broker.Stats.Counters by name, in that
// order, then "protocol_errors": the ERRORs sent, by code, in the order
// of broker.ErrorCodes.
type StatsInfo struct {
	Counters []NamedCount
	Errors   []NamedCount
	// Group, as "group", says who leads a replicated group and what
	// this broker is in it; absent for a broker on its own.
	Group *GroupInfo
	// Rekey, last as "rekey", is the journal's rekey under way or the
	// last one (emq journal rekey); absent when none ran since the
	// journal opened.
	Rekey *store.RekeyStatus
}

// GroupInfo is a broker's place in a replicated group: its role, its
// name, who leads; and, when queues are spread over several groups, the
// group's shard and the version of the placement it serves by.
type GroupInfo struct {
	group.Info
	Shard     string `json:"shard,omitempty"`
	Placement int64  `json:"placement,omitempty"`
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
	buf.WriteString(`"` + broker.ErrorsName + `":{`)
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
	if si.Rekey != nil {
		r, err := json.Marshal(si.Rekey)
		if err != nil {
			return nil, err
		}
		buf.WriteString(`,"rekey":`)
		buf.Write(r)
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
		if c.Name == "rekey" {
			si.Rekey = new(store.RekeyStatus)
			if err := json.Unmarshal(c.raw, si.Rekey); err != nil {
				return fmt.Errorf("stats: rekey: %w", err)
			}
			continue
		}
		if c.Name != broker.ErrorsName {
			var v int64
			if err := json.Unmarshal(c.raw, &v); err != nil {
				return fmt.Errorf("stats: counter %s: %w", c.Name, err)
			}
			si.Counters = append(si.Counters, NamedCount{c.Name, v})
			continue
		}
		var errs orderedCounts
		if err := json.Unmarshal(c.raw, &errs); err != nil {
			return fmt.Errorf("stats: %s: %w", broker.ErrorsName, err)
		}
		for _, e := range errs {
			var v int64
			if err := json.Unmarshal(e.raw, &v); err != nil {
				return fmt.Errorf("stats: %s %s: %w", broker.ErrorsName, e.Name, err)
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

// statsInfo is the counters of b, with pub/sub's when it is on, and
// the group's place g (nil: a broker on its own).
func statsInfo(b *broker.Broker, g *GroupInfo) StatsInfo {
	si := StatsInfo{Group: g}
	st := b.Stats()
	for _, c := range st.Counters() {
		si.Counters = append(si.Counters, NamedCount{c.Name, c.Value})
	}
	for _, e := range st.ErrorCounts() {
		si.Errors = append(si.Errors, NamedCount{e.Name, e.Value})
	}
	if ps := b.PubSub(); ps.On {
		for i, v := range []int64{int64(ps.Published), int64(ps.Delivered), int64(ps.Dropped), int64(ps.Subscribers)} {
			si.Counters = append(si.Counters, NamedCount{PubSubCounters[i], v})
		}
	}
	if rk := b.RekeyStatus(); rk.Key != "" {
		si.Rekey = &rk
	}
	return si
}

// PubSubCounters are the names of pub/sub's figures in the stats API,
// after Counters, when pub/sub is on.
var PubSubCounters = []string{"pubsub_published", "pubsub_delivered", "pubsub_dropped", "pubsub_subscribers"}

// ImportResult answers an import of a moved queue's jobs: how many were
// new (the others were stored already).
type ImportResult struct {
	Imported int `json:"imported"`
}
