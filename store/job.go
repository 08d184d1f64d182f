package store

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
)

// State is where a stored job stands.
type State uint8

// The states of a stored job. In flight is not a stored state: the broker
// knows which pending jobs a worker holds.
const (
	Pending State = 1 // waiting for (or held by) a worker
	Dead    State = 2 // out of attempts; in the dead-letter list
	Done    State = 3 // replied to, kept with its result until that expires
	// Cancelled: an operator or client cancelled it; kept like a done job
	// (with a keep time) so that it can be seen, never run again.
	Cancelled State = 4
	// Waiting: stored and ACKed, it waits for other jobs (Job.After) or a
	// batch (Job.AfterBatch) before it is pending (workflow.go).
	Waiting State = 5
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Dead:
		return "dead"
	case Done:
		return "done"
	case Cancelled:
		return "cancelled"
	case Waiting:
		return "waiting"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseState reads a state's name.
func ParseState(s string) (State, error) {
	switch s {
	case "pending":
		return Pending, nil
	case "waiting":
		return Waiting, nil
	case "dead":
		return Dead, nil
	case "done":
		return Done, nil
	case "cancelled":
		return Cancelled, nil
	}
	return 0, fmt.Errorf("%w: unknown job state %q (want waiting, pending, dead, done or cancelled)", ErrBadFilter, s)
}

// Job is one stored job: everything the broker needs to dispatch it again
// after a restart.
type Job struct {
	MsgID     string
	Queue     string
	Headers   string // the headers frame as the client sent it
	Payload   []byte
	ClientID  []byte    // the client's routing id, for the REPLY
	Enqueued  time.Time // when the journal took it
	Attempts  int       // deliveries that ended without a REPLY
	LastError string    // why the last attempt ended
	NotBefore time.Time // not to be dispatched before this (delay, backoff); zero = now
	Finished  time.Time // when it was done or cancelled (kept where NotBefore is)
	State     State
	Seq       uint64 // position in its queue: FIFO order
	// PayloadSize is len(Payload), also where Payload is left out (Load).
	PayloadSize int
	// Trail is what happened to the job, oldest first: the last MaxTrail
	// events the broker wrote with its changes (RecordAttempt, Bury,
	// Complete, Revive). Its receipt is Enqueued.
	Trail []TrailEvent
	// Unique is the job's unique key in its queue (header unique:), ""
	// for none: while the job is pending the journal stores no other job
	// with it, and for UniqueFor after it is done (UniqueError).
	Unique    string
	UniqueFor time.Duration // whole seconds
	// Workflow (workflow.go): the jobs it waits for (header after), the
	// batch it waits for, whether a parent's death cancels it (the
	// default) or lets it run, and the batch it belongs to. Waits is how
	// many of its parents (and its batch) it still waits for, while
	// Waiting.
	After       []string
	AfterBatch  string
	RunIfFailed bool
	Batch       string
	Waits       int
	// BatchOpen, given to Append, leaves Batch open for more jobs (header
	// batch-open); it is not stored with the job.
	BatchOpen bool

	head bool // decoded from a head (head.go): no payload, no trail to write back
}

// live reports whether a job in state s may still run.
func (s State) live() bool { return s == Pending || s == Waiting }

// workflow reports whether the record needs version 4.
func (j *Job) workflow() bool {
	return len(j.After) > 0 || j.AfterBatch != "" || j.Batch != "" || j.RunIfFailed || j.Waits > 0
}

// finished reports whether the job's time field is Finished.
func (s State) finished() bool { return s == Done || s == Cancelled }

// TrailEvent is one step of a job's history.
type TrailEvent struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"` // as broker.Event's kinds: dispatched, failed, replied, ...
	Worker  string    `json:"worker,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

// Bounds of a trail: it keeps the last MaxTrail events, each reason cut
// at MaxTrailReason bytes, so a job that fails for ever does not grow.
const (
	MaxTrail       = 32
	MaxTrailReason = 512
)

// withTrail returns trail with events added, the oldest dropped past
// MaxTrail, long reasons cut.
func withTrail(trail, events []TrailEvent) []TrailEvent {
	for _, e := range events {
		if len(e.Reason) > MaxTrailReason {
			e.Reason = strings.ToValidUTF8(e.Reason[:MaxTrailReason], "") + "…"
		}
		trail = append(trail, e)
	}
	if n := len(trail) - MaxTrail; n > 0 {
		trail = append(trail[:0:0], trail[n:]...)
	}
	return trail
}

// Limits of what a job may hold, so a record always fits bbolt's limits.
const (
	MaxIDLen     = 255
	MaxQueueLen  = 255
	MaxUniqueLen = 255
)

// recordVersion is what encode writes; version 1 records (no trail) are
// read too. A job with a unique key is written as version 3 (the key and
// its hold after the trail), others stay version 2.
const (
	recordVersion   = 2
	uniqueVersion   = 3
	workflowVersion = 4
)

// A record: version byte, state byte, the sequence as 8 fixed bytes (so
// the committer can set it in an encoded record), then enqueue time, not
// before, attempts as varints, then queue, headers, client id, last error
// and payload, each with a uvarint length; version 2 then has the trail:
// a count, and each event's time, attempt, kind, worker and reason;
// version 3 then the unique key (uvarint length) and its hold in seconds;
// version 4 (a job of a workflow) has those too, then the batch, the
// batch waited for, a flags byte (1: run if a parent failed), the waits
// left, and the parents (a count, then each with its length).
const (
	recState  = 1
	recSeq    = 2
	recFields = 10
)

// encode writes the job's record.
func (j *Job) encode() []byte {
	if j.head {
		panic(fmt.Sprintf("store: job %s read as its head is written back: its payload and trail would be lost", j.MsgID))
	}
	n := recFields + 8*binary.MaxVarintLen64 +
		len(j.Queue) + len(j.Headers) + len(j.Payload) + len(j.ClientID) + len(j.LastError)
	for _, e := range j.Trail {
		n += 5*binary.MaxVarintLen64 + len(e.Kind) + len(e.Worker) + len(e.Reason)
	}
	n += len(j.Unique) + binary.MaxVarintLen64
	v := byte(recordVersion)
	if j.Unique != "" {
		v = uniqueVersion
	}
	if j.workflow() {
		v = workflowVersion
		n += len(j.Batch) + len(j.AfterBatch) + 4*binary.MaxVarintLen64
		for _, p := range j.After {
			n += len(p) + binary.MaxVarintLen64
		}
	}
	b := make([]byte, 0, n)
	b = append(b, v, byte(j.State))
	b = binary.BigEndian.AppendUint64(b, j.Seq)
	b = binary.AppendVarint(b, j.Enqueued.UnixNano())
	if j.State.finished() {
		b = binary.AppendVarint(b, unixNano(j.Finished))
	} else {
		b = binary.AppendVarint(b, unixNano(j.NotBefore))
	}
	b = binary.AppendUvarint(b, uint64(j.Attempts))
	for _, s := range [][]byte{[]byte(j.Queue), []byte(j.Headers), j.ClientID, []byte(j.LastError), j.Payload} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(j.Trail)))
	for _, e := range j.Trail {
		b = binary.AppendVarint(b, unixNano(e.Time))
		b = binary.AppendUvarint(b, uint64(e.Attempt))
		for _, s := range []string{e.Kind, e.Worker, e.Reason} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	if v >= uniqueVersion {
		b = binary.AppendUvarint(b, uint64(len(j.Unique)))
		b = append(b, j.Unique...)
		b = binary.AppendUvarint(b, uint64(j.UniqueFor/time.Second))
	}
	if v >= workflowVersion {
		for _, s := range []string{j.Batch, j.AfterBatch} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		flags := byte(0)
		if j.RunIfFailed {
			flags |= 1
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(j.Waits))
		b = binary.AppendUvarint(b, uint64(len(j.After)))
		for _, p := range j.After {
			b = binary.AppendUvarint(b, uint64(len(p)))
			b = append(b, p...)
		}
	}
	return b
}

// knownVersion reports a record version this binary reads.
func knownVersion(b []byte) bool {
	return len(b) >= recFields && recVersion(b) >= 1 && recVersion(b) <= workflowVersion
}

// decodeJob reads a record; it copies everything, so the result outlives
// the transaction. Without withPayload it leaves the payload where it is
// (only its size is read): a large one is never touched.
func decodeJob(msgid, b []byte, withPayload bool) (*Job, error) {
	if encrypted(b) {
		return nil, fmt.Errorf("%w: the record of job %q is encrypted, and the journal was opened without its keys", ErrKeys, msgid)
	}
	return decodeRecord(msgid, b, withPayload)
}

// decodeRecord is decodeJob of a record in clear or encrypted (a
// backend's tools, which have no keys): an encrypted one's headers and
// payload are its encrypted parts.
func decodeRecord(msgid, b []byte, withPayload bool) (*Job, error) {
	if !knownVersion(b) {
		return nil, fmt.Errorf("%w: the record of job %q has an unknown version", ErrCorrupt, msgid)
	}
	head := isHead(b)
	if head && withPayload {
		return nil, fmt.Errorf("store: job %q: its head holds no payload", msgid)
	}
	j := &Job{MsgID: string(msgid), State: State(b[recState]), Seq: binary.BigEndian.Uint64(b[recSeq:]), head: head}
	v := recVersion(b)
	r := reader{b: b[recFields:]}
	j.Enqueued = time.Unix(0, r.varint())
	if nb := r.varint(); nb != 0 && j.State.finished() {
		j.Finished = time.Unix(0, nb)
	} else if nb != 0 {
		j.NotBefore = time.Unix(0, nb)
	}
	j.Attempts = int(r.uvarint())
	j.Queue = string(r.bytes())
	j.Headers = string(r.bytes())
	j.ClientID = clone(r.bytes())
	j.LastError = string(r.bytes())
	payload := r.bytes()
	if v >= 2 {
		n := r.uvarint()
		for i := uint64(0); i < n && !r.bad; i++ {
			e := TrailEvent{}
			if t := r.varint(); t != 0 {
				e.Time = time.Unix(0, t)
			}
			e.Attempt = int(r.uvarint())
			e.Kind, e.Worker, e.Reason = string(r.bytes()), string(r.bytes()), string(r.bytes())
			j.Trail = append(j.Trail, e)
		}
	}
	if v >= uniqueVersion {
		j.Unique = string(r.bytes())
		j.UniqueFor = time.Duration(min(r.uvarint(), math.MaxUint32)) * time.Second
	}
	if v >= workflowVersion {
		j.Batch, j.AfterBatch = string(r.bytes()), string(r.bytes())
		if flags := r.u8(); flags&1 != 0 {
			j.RunIfFailed = true
		}
		j.Waits = int(min(r.uvarint(), math.MaxInt32))
		n := r.uvarint()
		for i := uint64(0); i < n && !r.bad; i++ {
			j.After = append(j.After, string(r.bytes()))
		}
	}
	if r.bad {
		return nil, fmt.Errorf("%w: the record of job %q is truncated", ErrCorrupt, msgid)
	}
	j.PayloadSize = len(payload)
	if head {
		size := reader{b: payload}
		if j.PayloadSize = int(min(size.uvarint(), math.MaxInt32)); size.bad {
			return nil, fmt.Errorf("%w: the head of job %q is truncated", ErrCorrupt, msgid)
		}
	}
	if withPayload {
		j.Payload = clone(payload)
	}
	return j, nil
}

// payloadOf returns the payload in a record, not copied.
func payloadOf(msgid, b []byte) ([]byte, error) {
	if encrypted(b) {
		return nil, fmt.Errorf("%w: the record of job %q is encrypted, and the journal was opened without its keys", ErrKeys, msgid)
	}
	if !knownVersion(b) {
		return nil, fmt.Errorf("%w: the record of job %q has an unknown version", ErrCorrupt, msgid)
	}
	if isHead(b) {
		return nil, fmt.Errorf("store: job %q: its head holds no payload", msgid)
	}
	r := reader{b: b[recFields:]}
	r.varint()
	r.varint()
	r.uvarint()
	for range 4 { // queue, headers, client id, last error
		r.bytes()
	}
	payload := r.bytes()
	if r.bad {
		return nil, fmt.Errorf("%w: the record of job %q is truncated", ErrCorrupt, msgid)
	}
	return payload, nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// uniqueOf reads a version 3 record's queue, unique key and hold without
// decoding (or copying) the rest: every Complete of a job with a key
// reads them.
func uniqueOf(msgid, b []byte) (queue, key []byte, hold time.Duration, err error) {
	if len(b) < recFields || recVersion(b) < uniqueVersion || recVersion(b) > workflowVersion {
		return nil, nil, 0, fmt.Errorf("%w: the record of job %q has no unique key", ErrCorrupt, msgid)
	}
	r := reader{b: b[recFields:]}
	r.varint()
	r.varint()
	r.uvarint()
	queue = r.bytes()
	for range 4 { // headers, client id, last error, payload
		r.bytes()
	}
	n := r.uvarint()
	for i := uint64(0); i < n && !r.bad; i++ { // the trail
		r.varint()
		r.uvarint()
		r.bytes()
		r.bytes()
		r.bytes()
	}
	key = r.bytes()
	hold = time.Duration(min(r.uvarint(), math.MaxUint32)) * time.Second
	if r.bad {
		return nil, nil, 0, fmt.Errorf("%w: the record of job %q is truncated", ErrCorrupt, msgid)
	}
	return queue, key, hold, nil
}

// indexKey reads from a record the job's key in its state's index,
// without decoding the rest.
func indexKey(msgid, b []byte) (State, []byte, error) {
	if !knownVersion(b) {
		return 0, nil, fmt.Errorf("%w: the record of job %q has an unknown version", ErrCorrupt, msgid)
	}
	r := reader{b: b[recFields:]}
	r.varint()
	r.varint()
	r.uvarint()
	q := r.bytes()
	if r.bad {
		return 0, nil, fmt.Errorf("%w: the record of job %q is truncated", ErrCorrupt, msgid)
	}
	return State(b[recState]), queueKey(string(q), binary.BigEndian.Uint64(b[recSeq:])), nil
}

// queueKey is a job's key in the pending and dead indexes: the queue name
// with its length in front (so one queue is one key prefix), then the
// sequence big-endian (so a queue's keys are in FIFO order).
func queueKey(queue string, seq uint64) []byte {
	k := make([]byte, 0, 1+len(queue)+8)
	k = append(k, byte(len(queue)))
	k = append(k, queue...)
	return binary.BigEndian.AppendUint64(k, seq)
}

// uniqueKey is a unique key's key in the unique index: the queue name
// with its length in front, then the key.
func uniqueKey(queue, key string) []byte {
	k := make([]byte, 0, 1+len(queue)+len(key))
	k = append(k, byte(len(queue)))
	k = append(k, queue...)
	return append(k, key...)
}

// queuePrefix is the key prefix of one queue in an index.
func queuePrefix(queue string) []byte {
	return append([]byte{byte(len(queue))}, queue...)
}

// splitQueueKey returns the queue of an index key.
func splitQueueKey(k []byte) (queue string, ok bool) {
	if len(k) < 1 || len(k) != 1+int(k[0])+8 {
		return "", false
	}
	return string(k[1 : 1+int(k[0])]), true
}
