package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// fixture is one subtest's journal on fresh storage, and the way to open
// that storage again.
type fixture struct {
	t    *testing.T
	h    Harness
	opts Options // what the storage was made with
	open func() (store.Journal, error)
	j    store.Journal // nil while the test holds it closed
}

func newFixture(t *testing.T, h Harness, o Options) *fixture {
	t.Helper()
	f := &fixture{t: t, opts: o, h: h, open: h.Fresh(t, o)}
	f.j = f.mustOpen()
	// Registered after Fresh's own cleanup, so it runs before it.
	t.Cleanup(func() {
		if f.j != nil {
			f.j.Close()
		}
	})
	return f
}

func (f *fixture) mustOpen() store.Journal {
	f.t.Helper()
	j, err := f.open()
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	return j
}

// reopen closes the journal and opens the same storage again.
func (f *fixture) reopen() {
	f.t.Helper()
	j := f.j
	f.j = nil
	if err := j.Close(); err != nil {
		f.t.Fatalf("close: %v", err)
	}
	f.j = f.mustOpen()
}

// job is a new job with every field but the times and attempts set.
func job(id, queue string) *store.Job {
	return &store.Job{
		MsgID:    id,
		Queue:    queue,
		Headers:  "timeout:5",
		Payload:  []byte("payload of " + id),
		ClientID: []byte{0, 'c', 0xff},
	}
}

// append appends each job and waits for it; each must be new.
func (f *fixture) append(jobs ...*store.Job) {
	f.t.Helper()
	for _, jb := range jobs {
		if dup := f.appendDup(jb); dup {
			f.t.Fatalf("append %s: reported a duplicate", jb.MsgID)
		}
	}
}

// appendDup appends a job, waits, and says whether it was a duplicate.
func (f *fixture) appendDup(jb *store.Job) bool {
	f.t.Helper()
	dup, err := store.Wait(func(done func(bool, error)) { f.j.Append(jb, done) })
	if err != nil {
		f.t.Fatalf("append %s: %v", jb.MsgID, err)
	}
	return dup
}

// appendAtOnce queues an append of each job without waiting in between,
// then waits for them all; each must be new.
func (f *fixture) appendAtOnce(jobs ...*store.Job) {
	f.t.Helper()
	b := f.batch()
	for _, jb := range jobs {
		f.j.Append(jb, b.flag("append "+jb.MsgID, false))
	}
	b.wait()
}

func (f *fixture) complete(id string, result []byte, keepUntil time.Time) (found bool) {
	f.t.Helper()
	found, err := store.Wait(func(done func(bool, error)) { f.j.Complete(id, result, keepUntil, nil, done) })
	if err != nil {
		f.t.Fatalf("complete %s: %v", id, err)
	}
	return found
}

func (f *fixture) remove(id string) (found bool) {
	f.t.Helper()
	found, err := store.Wait(func(done func(bool, error)) { f.j.Remove(id, done) })
	if err != nil {
		f.t.Fatalf("remove %s: %v", id, err)
	}
	return found
}

func (f *fixture) attempt(id, reason string, notBefore time.Time) *store.Job {
	f.t.Helper()
	return f.jobWrite("record an attempt of "+id, func(done func(*store.Job, error)) {
		f.j.RecordAttempt(id, reason, notBefore, nil, done)
	})
}

func (f *fixture) bury(id, reason string) *store.Job {
	f.t.Helper()
	return f.jobWrite("bury "+id, func(done func(*store.Job, error)) { f.j.Bury(id, reason, nil, done) })
}

func (f *fixture) revive(id string) *store.Job {
	f.t.Helper()
	return f.jobWrite("revive "+id, func(done func(*store.Job, error)) { f.j.Revive(id, nil, done) })
}

func (f *fixture) jobWrite(what string, write func(done func(*store.Job, error))) *store.Job {
	f.t.Helper()
	j, err := store.Wait(write)
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
	if j == nil {
		f.t.Fatalf("%s: no job given back", what)
	}
	return j
}

func (f *fixture) count(what string, write func(done func(int, error))) int {
	f.t.Helper()
	n, err := store.Wait(write)
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
	return n
}

func (f *fixture) purge(queue string) int {
	f.t.Helper()
	return f.count("purge "+queue, func(done func(int, error)) { f.j.PurgeQueue(queue, done) })
}

func (f *fixture) expire(now time.Time) int {
	f.t.Helper()
	return f.count("expire results", func(done func(int, error)) { f.j.ExpireResults(now, done) })
}

func (f *fixture) get(id string) *store.Job {
	f.t.Helper()
	j, err := f.j.Get(id)
	if err != nil {
		f.t.Fatalf("get %s: %v", id, err)
	}
	return j
}

// gone checks that a msgid is not stored.
func (f *fixture) gone(id string) {
	f.t.Helper()
	if j, err := f.j.Get(id); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("get %s: %v, %v; want ErrNotFound", id, describe(j), err)
	}
}

func (f *fixture) result(id string) []byte {
	f.t.Helper()
	r, err := f.j.Result(id)
	if err != nil {
		f.t.Fatalf("result of %s: %v", id, err)
	}
	return r
}

// noResult checks that no result is kept for a msgid.
func (f *fixture) noResult(id string) {
	f.t.Helper()
	if r, err := f.j.Result(id); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("result of %s: %q, %v; want ErrNotFound", id, r, err)
	}
}

// load returns every pending job, checking what Load promises of each
// call: pending jobs only, queue by queue (a queue's jobs are one run),
// within a queue in FIFO order (growing Seq), and without its payload,
// whose size it gives. The payloads are then read with Payloads and put
// in the jobs, so that callers compare whole jobs.
func (f *fixture) load() []*store.Job {
	f.t.Helper()
	var out []*store.Job
	if err := f.j.Load(func(j *store.Job) error { out = append(out, j); return nil }); err != nil {
		f.t.Fatalf("load: %v", err)
	}
	msgids := ids(out)
	err := f.j.Payloads(msgids, func(i int, p []byte, err error) {
		switch j := out[i]; {
		case err != nil:
			f.t.Errorf("payload of loaded job %s: %v", j.MsgID, err)
		case j.Payload != nil:
			f.t.Errorf("load gave %s with its payload %q; payloads stay in the journal", j.MsgID, j.Payload)
		case len(p) != j.PayloadSize:
			f.t.Errorf("load gave %s a payload size of %d; its payload has %d bytes", j.MsgID, j.PayloadSize, len(p))
		default:
			j.Payload = p
		}
	})
	if err != nil {
		f.t.Fatalf("payloads of the loaded jobs: %v", err)
	}
	done := map[string]bool{}
	for i, j := range out {
		if j.State != store.Pending {
			f.t.Errorf("load gave %s in state %s", j.MsgID, j.State)
		}
		if i == 0 || out[i-1].Queue != j.Queue {
			if done[j.Queue] {
				f.t.Errorf("load gave queue %q in more than one run: %v", j.Queue, ids(out))
			}
			done[j.Queue] = true
		} else if prev := out[i-1]; prev.Seq >= j.Seq {
			f.t.Errorf("load gave %s (seq %d) after %s (seq %d) in queue %q", j.MsgID, j.Seq, prev.MsgID, prev.Seq, j.Queue)
		}
	}
	return out
}

// pending returns the msgids Load gives, per queue, in order.
func (f *fixture) pending() map[string][]string {
	f.t.Helper()
	return byQueue(f.load())
}

// list pages through a listing with the given options and returns every
// job it gave, checking each page: no more than Limit jobs, and a page
// that says there is more is full (unless MaxScan ended it).
func (f *fixture) list(opts store.ListOptions) []*store.Job {
	f.t.Helper()
	limit := opts.Limit
	if limit == 0 {
		limit = 100
	}
	var out []*store.Job
	for pages := 0; ; pages++ {
		if pages > 10000 {
			f.t.Fatalf("list %+v: no end after 10000 pages", opts)
		}
		p, err := f.j.List(opts)
		if err != nil {
			f.t.Fatalf("list %+v: %v", opts, err)
		}
		if len(p.Jobs) > limit || (p.Next != "" && len(p.Jobs) < limit && opts.MaxScan == 0) {
			f.t.Fatalf("list %+v: a page of %d jobs with next %q (limit %d)", opts, len(p.Jobs), p.Next, limit)
		}
		out = append(out, p.Jobs...)
		if p.Next == "" {
			return out
		}
		opts.After = p.Next
	}
}

// counts returns the non-empty counts per queue; a queue listed twice is
// an error.
func (f *fixture) counts() map[string]store.Count {
	f.t.Helper()
	cs, err := f.j.Counts()
	if err != nil {
		f.t.Fatalf("counts: %v", err)
	}
	out := map[string]store.Count{}
	for _, c := range cs {
		if _, twice := out[c.Queue]; twice {
			f.t.Errorf("counts name queue %q twice: %+v", c.Queue, cs)
		}
		if c.Pending != 0 || c.Dead != 0 {
			out[c.Queue] = c
		}
	}
	// Asked for some states, it counts those alone, the same.
	some, err := f.j.Counts(store.Dead, store.Done)
	if err != nil {
		f.t.Fatalf("counts of dead and done: %v", err)
	}
	for _, c := range some {
		all := out[c.Queue]
		if c.Pending != 0 || c.Dead != all.Dead || (all.Done != 0 && c.Done != all.Done) {
			f.t.Errorf("counts of dead and done for %q: %+v; of every state %+v", c.Queue, c, all)
		}
	}
	return out
}

// snapshot describes everything a caller can see: every job in full,
// the counts, and the results of the given msgids.
func (f *fixture) snapshot(results ...string) string {
	f.t.Helper()
	var b strings.Builder
	for _, j := range f.list(store.ListOptions{Limit: 1000}) {
		fmt.Fprintln(&b, describe(j))
	}
	counts := f.counts()
	for _, q := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, "count %+v\n", counts[q])
	}
	for _, id := range results {
		r, err := f.j.Result(id)
		fmt.Fprintf(&b, "result of %q: %q %v\n", id, r, err)
	}
	return b.String()
}

// refused makes a call that must fail with target (matched with
// errors.Is) and checks that it changed nothing a caller can see.
func (f *fixture) refused(what string, target error, call func() error, results ...string) {
	f.t.Helper()
	before := f.snapshot(results...)
	if err := call(); !errors.Is(err, target) {
		f.t.Errorf("%s: %v; want %v", what, err, target)
	}
	if after := f.snapshot(results...); after != before {
		f.t.Errorf("%s changed what is stored:\nbefore\n%s\nafter\n%s", what, before, after)
	}
}

// unchanged makes a call that must succeed without changing anything.
func (f *fixture) unchanged(what string, call func(), results ...string) {
	f.t.Helper()
	before := f.snapshot(results...)
	call()
	if after := f.snapshot(results...); after != before {
		f.t.Errorf("%s changed what is stored:\nbefore\n%s\nafter\n%s", what, before, after)
	}
}

// batch collects the outcomes of writes queued at once, without waiting
// for each, and checks them as they come (on the journal's goroutine:
// they only record, never block).
type batch struct {
	t  *testing.T
	wg sync.WaitGroup
}

func (f *fixture) batch() *batch { return &batch{t: f.t} }

// flag expects a write to succeed with the given dup (Append) or found
// (Complete, Remove).
func (b *batch) flag(what string, want bool) func(bool, error) {
	b.wg.Add(1)
	return func(got bool, err error) {
		defer b.wg.Done()
		if err != nil || got != want {
			b.t.Errorf("%s: %v, %v; want %v, nil", what, got, err, want)
		}
	}
}

// job expects a write to succeed and give back a job in state with
// attempts.
func (b *batch) job(what string, state store.State, attempts int) func(*store.Job, error) {
	b.wg.Add(1)
	return func(j *store.Job, err error) {
		defer b.wg.Done()
		if err != nil || j == nil || j.State != state || j.Attempts != attempts {
			b.t.Errorf("%s: %s, %v; want a %s job with %d attempts", what, describe(j), err, state, attempts)
		}
	}
}

// count expects a write to succeed and report n.
func (b *batch) count(what string, want int) func(int, error) {
	b.wg.Add(1)
	return func(n int, err error) {
		defer b.wg.Done()
		if err != nil || n != want {
			b.t.Errorf("%s: %d, %v; want %d, nil", what, n, err, want)
		}
	}
}

// wait waits for every done of the batch.
func (b *batch) wait() { b.wg.Wait() }

// diffJob says how got differs from want ("" when it does not). Times
// are compared as instants, byte fields by content (nil = empty).
func diffJob(got, want *store.Job) string {
	if got == nil || want == nil {
		if got == want {
			return ""
		}
		return fmt.Sprintf("got %s, want %s", describe(got), describe(want))
	}
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s %q, want %q", field, g, w)) }
	if got.MsgID != want.MsgID {
		add("MsgID", got.MsgID, want.MsgID)
	}
	if got.Queue != want.Queue {
		add("Queue", got.Queue, want.Queue)
	}
	if got.Headers != want.Headers {
		add("Headers", got.Headers, want.Headers)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		add("Payload", got.Payload, want.Payload)
	}
	if got.PayloadSize != len(want.Payload) {
		d = append(d, fmt.Sprintf("PayloadSize %d, want %d", got.PayloadSize, len(want.Payload)))
	}
	if !bytes.Equal(got.ClientID, want.ClientID) {
		add("ClientID", got.ClientID, want.ClientID)
	}
	if !got.Enqueued.Equal(want.Enqueued) {
		add("Enqueued", got.Enqueued.Format(time.RFC3339Nano), want.Enqueued.Format(time.RFC3339Nano))
	}
	if got.Attempts != want.Attempts {
		d = append(d, fmt.Sprintf("Attempts %d, want %d", got.Attempts, want.Attempts))
	}
	if got.LastError != want.LastError {
		add("LastError", got.LastError, want.LastError)
	}
	if !got.NotBefore.Equal(want.NotBefore) {
		add("NotBefore", got.NotBefore.Format(time.RFC3339Nano), want.NotBefore.Format(time.RFC3339Nano))
	}
	if got.State != want.State {
		d = append(d, fmt.Sprintf("State %s, want %s", got.State, want.State))
	}
	if got.Seq != want.Seq {
		d = append(d, fmt.Sprintf("Seq %d, want %d", got.Seq, want.Seq))
	}
	if got.Unique != want.Unique || got.UniqueFor != want.UniqueFor {
		d = append(d, fmt.Sprintf("Unique %q for %v, want %q for %v", got.Unique, got.UniqueFor, want.Unique, want.UniqueFor))
	}
	return strings.Join(d, "; ")
}

// describe writes out a job in full, times to the nanosecond.
func describe(j *store.Job) string {
	if j == nil {
		return "no job"
	}
	return fmt.Sprintf("%q queue=%q headers=%q payload=%q client=%q enqueued=%d attempts=%d error=%q notbefore=%d state=%s seq=%d unique=%q/%v",
		j.MsgID, j.Queue, j.Headers, j.Payload, j.ClientID, nanos(j.Enqueued), j.Attempts, j.LastError, nanos(j.NotBefore), j.State, j.Seq, j.Unique, j.UniqueFor)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func ids(jobs []*store.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.MsgID)
	}
	return out
}

func byQueue(jobs []*store.Job) map[string][]string {
	out := map[string][]string{}
	for _, j := range jobs {
		out[j.Queue] = append(out[j.Queue], j.MsgID)
	}
	return out
}

// scrambledID makes the i-th of a run of msgids that do not sort in the
// order they are made, as v4 UUIDs do not: order must come from the
// journal, not from the ids.
func scrambledID(i int) string { return fmt.Sprintf("%08x-%d", uint32(i)*2654435761, i) }
