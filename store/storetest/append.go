package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// Append stores every field as the caller gave it, byte for byte and to
// the nanosecond; it sets Enqueued when the caller did not, and gives the
// job its place in its queue (Seq), on the caller's Job too.
func appendKeepsEveryField(t *testing.T, f *fixture) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	given := &store.Job{
		MsgID:     "m1",
		Queue:     "email",
		Headers:   "timeout:5,reply-requested:true",
		Payload:   every,
		ClientID:  []byte{0x00, 'c', 0xff, 0x00},
		Enqueued:  time.Unix(1700000000, 5),
		Attempts:  2,
		LastError: "worker lost",
		NotBefore: time.Unix(1800000000, 123456789),
	}
	want := *given
	want.Payload = slices.Clone(given.Payload)
	f.append(given)
	if given.Seq == 0 {
		t.Fatal("Append did not set the job's Seq")
	}
	want.State, want.Seq = store.Pending, given.Seq
	if d := diffJob(f.get("m1"), &want); d != "" {
		t.Fatalf("get m1: %s", d)
	}
	// The journal holds its own copy: neither the caller's job nor the
	// one it gave back is the stored one.
	given.Payload[0] = 'x'
	f.get("m1").Payload[1] = 'y'
	if d := diffJob(f.get("m1"), &want); d != "" {
		t.Fatalf("get m1 after changing the caller's copies: %s", d)
	}

	// A job with only a msgid and a queue: the journal sets Enqueued.
	before := time.Now()
	bare := &store.Job{MsgID: "m2", Queue: "email"}
	f.append(bare)
	after := time.Now()
	got := f.get("m2")
	if got.Enqueued.Before(before.Add(-time.Second)) || got.Enqueued.After(after.Add(time.Second)) {
		t.Errorf("m2 enqueued at %v, want about %v", got.Enqueued, before)
	}
	if d := diffJob(got, &store.Job{MsgID: "m2", Queue: "email", Enqueued: got.Enqueued, State: store.Pending, Seq: bare.Seq}); d != "" {
		t.Errorf("get m2: %s", d)
	}

	third := job("m3", "email")
	f.append(third)
	if !(want.Seq < bare.Seq && bare.Seq < third.Seq) {
		t.Errorf("seqs %d, %d, %d of three appends to one queue do not grow", want.Seq, bare.Seq, third.Seq)
	}
	if got := f.get("m3").Seq; got != third.Seq {
		t.Errorf("m3 stored with seq %d, Append set %d", got, third.Seq)
	}
	if _, err := f.j.Get("unknown"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of an unknown msgid: %v; want ErrNotFound", err)
	}
}

// Jobs appended to several queues, interleaved, load back queue by queue,
// each queue in append order, whatever their msgids; also after a reopen,
// and appends after it go to the tails.
func queuesLoadInAppendOrder(t *testing.T, f *fixture) {
	queues := []string{"a", "ab", "b", "a/b"}
	want := map[string][]string{}
	var jobs []*store.Job
	for i := range 200 {
		q := queues[(i*7+i/5)%len(queues)]
		id := scrambledID(i)
		jobs = append(jobs, job(id, q))
		want[q] = append(want[q], id)
	}
	if slices.IsSorted(ids(jobs)) {
		t.Fatal("the test's msgids sort in append order")
	}
	f.appendAtOnce(jobs...)
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded\n %v\nwant\n %v", got, want)
	}
	f.reopen()
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded after reopening\n %v\nwant\n %v", got, want)
	}
	for i := 200; i < 220; i++ {
		q := queues[i%len(queues)]
		id := scrambledID(i)
		f.append(job(id, q))
		want[q] = append(want[q], id)
	}
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded after appending to a reopened journal\n %v\nwant\n %v", got, want)
	}
}

// Queue names that are prefixes of one another ("a", "ab", "a/b") are
// separate queues to every call that takes or reports a queue.
func prefixQueuesNeverMix(t *testing.T, f *fixture) {
	queues := []string{"a", "ab", "a/b", "b"}
	var jobs []*store.Job
	for i := range 3 {
		for _, q := range queues {
			jobs = append(jobs, job(fmt.Sprintf("%s-%d", q, i), q))
		}
	}
	f.appendAtOnce(jobs...)
	f.bury("ab-0", "boom")

	if got := ids(f.list(store.ListOptions{Queue: "a"})); !reflect.DeepEqual(got, []string{"a-0", "a-1", "a-2"}) {
		t.Errorf("list of queue a: %v", got)
	}
	if got := ids(f.list(store.ListOptions{Queue: "a", State: store.Dead})); len(got) != 0 {
		t.Errorf("dead of queue a: %v", got)
	}
	if got := ids(f.list(store.ListOptions{Queue: "ab"})); !reflect.DeepEqual(got, []string{"ab-1", "ab-2", "ab-0"}) {
		t.Errorf("list of queue ab: %v", got)
	}
	wantCounts := map[string]store.Count{
		"a":   {Queue: "a", Pending: 3},
		"ab":  {Queue: "ab", Pending: 2, Dead: 1},
		"a/b": {Queue: "a/b", Pending: 3},
		"b":   {Queue: "b", Pending: 3},
	}
	if got := f.counts(); !reflect.DeepEqual(got, wantCounts) {
		t.Errorf("counts %v, want %v", got, wantCounts)
	}
	if n := f.purge("a"); n != 3 {
		t.Errorf("purge of queue a removed %d, want 3", n)
	}
	want := map[string][]string{"ab": {"ab-1", "ab-2"}, "a/b": {"a/b-0", "a/b-1", "a/b-2"}, "b": {"b-0", "b-1", "b-2"}}
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Errorf("after purging queue a: %v, want %v", got, want)
	}
}

// Load stops at the first error its callback returns, and returns it.
func loadStopsAtError(t *testing.T, f *fixture) {
	f.appendAtOnce(job("a", "q"), job("b", "q"), job("c", "q"))
	stop := errors.New("enough")
	var seen []string
	err := f.j.Load(func(j *store.Job) error {
		seen = append(seen, j.MsgID)
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !reflect.DeepEqual(seen, []string{"a", "b"}) {
		t.Fatalf("load with a callback failing at the second job: %v after %v; want the callback's error after [a b]", err, seen)
	}
}

// A second Append of a stored msgid, pending or dead, reports a
// duplicate and changes nothing, whatever the new job holds.
func duplicateChangesNothing(t *testing.T, f *fixture) {
	f.append(job("m", "q"), job("d", "q"))
	f.bury("d", "boom")
	for _, id := range []string{"m", "d"} {
		other := job(id, "other")
		other.Payload, other.Headers = []byte("different"), "timeout:9"
		f.unchanged("append of stored "+id+" again", func() {
			if !f.appendDup(other) {
				t.Errorf("append of stored %s again: not reported as a duplicate", id)
			}
		})
	}
}

// Many Appends of one msgid queued at once store it once: the first
// (writes apply in call order); from many goroutines, exactly one.
func appendsAtOnceStoreOnce(t *testing.T, f *fixture) {
	b := f.batch()
	for i := range 50 {
		j := job("once", "q")
		j.Payload = fmt.Appendf(nil, "copy %d", i)
		f.j.Append(j, b.flag(fmt.Sprintf("append %d of once", i), i > 0))
	}
	b.wait()
	if got := f.get("once"); string(got.Payload) != "copy 0" {
		t.Errorf("stored %q, want the first append's copy 0", got.Payload)
	}

	var wg sync.WaitGroup
	stored := make(chan string, 50)
	for i := range 50 {
		wg.Go(func() {
			j := job("racing", "q")
			j.Payload = fmt.Appendf(nil, "copy %d", i)
			dup, err := store.Wait(func(done func(bool, error)) { f.j.Append(j, done) })
			if err != nil {
				t.Errorf("append %d of racing: %v", i, err)
			}
			if !dup {
				stored <- string(j.Payload)
			}
		})
	}
	wg.Wait()
	close(stored)
	var won []string
	for p := range stored {
		won = append(won, p)
	}
	if len(won) != 1 || string(f.get("racing").Payload) != won[0] {
		t.Errorf("appends from 50 goroutines stored %v; the journal holds %q", won, f.get("racing").Payload)
	}
	if got := f.pending(); !reflect.DeepEqual(got, map[string][]string{"q": {"once", "racing"}}) {
		t.Errorf("pending %v, want once and racing", got)
	}
}

// A job without a msgid or queue, or with either over 255 bytes, is
// ErrInvalidJob and stores nothing; 255 bytes are fine.
func invalidJobIsRefused(t *testing.T, f *fixture) {
	f.append(job("present", "q"))
	long := strings.Repeat("x", 256)
	for name, bad := range map[string]*store.Job{
		"no msgid":         job("", "q"),
		"no queue":         job("m", ""),
		"msgid of 256 B":   job(long, "q"),
		"queue of 256 B":   job("m", long),
		"nothing but data": {Payload: []byte("p")},
	} {
		f.refused("append of a job with "+name, store.ErrInvalidJob, func() error {
			_, err := store.Wait(func(done func(bool, error)) { f.j.Append(bad, done) })
			return err
		})
	}
	longest := job(strings.Repeat("i", store.MaxIDLen), strings.Repeat("q", store.MaxQueueLen))
	f.append(longest)
	if d := diffJob(f.get(longest.MsgID), &store.Job{
		MsgID: longest.MsgID, Queue: longest.Queue, Headers: longest.Headers, Payload: longest.Payload,
		ClientID: longest.ClientID, Enqueued: f.get(longest.MsgID).Enqueued, State: store.Pending, Seq: longest.Seq,
	}); d != "" {
		t.Errorf("job with a 255-byte msgid and queue: %s", d)
	}
}

// A job over the backend's size limit is ErrTooLarge, with the limit in
// the error text; appends queued with it in the same moment are stored.
func tooLargeIsRefusedAlone(t *testing.T, f *fixture) {
	limit := f.opts.MaxJobSize
	big := job("big", "q")
	big.Payload = make([]byte, limit+1)
	small := job("small", "q")
	small.Payload = make([]byte, limit/2)

	b := f.batch()
	f.j.Append(job("before", "q"), b.flag("append before", false))
	b.wg.Add(1)
	f.j.Append(big, func(dup bool, err error) {
		defer b.wg.Done()
		if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(limit)) {
			t.Errorf("append of a job over the limit: %v, %v; want ErrTooLarge naming the limit %d", dup, err, limit)
		}
	})
	f.j.Append(small, b.flag("append of a job half the limit", false))
	b.wait()
	if got := f.pending(); !reflect.DeepEqual(got, map[string][]string{"q": {"before", "small"}}) {
		t.Errorf("pending %v, want before and small", got)
	}
	f.gone("big")
	f.refused("append of a job over the limit", store.ErrTooLarge, func() error {
		_, err := store.Wait(func(done func(bool, error)) { f.j.Append(big, done) })
		return err
	})
}

// Payloads gives each job's payload, byte for byte, in the order asked,
// and ErrNotFound for a msgid that is not stored (or no longer is), without
// failing the others; a dead job's payload is still there.
func payloadsReadsEachInOrder(t *testing.T, f *fixture) {
	a, b, empty, dead := job("a", "q"), job("b", "q"), job("empty", "q"), job("dead", "q")
	a.Payload, empty.Payload = []byte{0, 0xff, 'a'}, nil
	f.append(a, b, empty, dead)
	f.bury("dead", "boom")
	f.complete("b", nil, time.Time{})
	want := map[string][]byte{"a": a.Payload, "empty": nil, "dead": dead.Payload}
	asked := []string{"dead", "b", "a", "nope", "empty", "a"}
	seen := 0
	err := f.j.Payloads(asked, func(i int, p []byte, err error) {
		if i != seen {
			t.Errorf("payload %d given as %d", seen, i)
		}
		seen++
		id := asked[i]
		w, stored := want[id]
		switch {
		case !stored && !errors.Is(err, store.ErrNotFound):
			t.Errorf("payload of %s (not stored): %q, %v; want ErrNotFound", id, p, err)
		case stored && (err != nil || !bytes.Equal(p, w)):
			t.Errorf("payload of %s: %q, %v; want %q", id, p, err, w)
		}
	})
	if err != nil || seen != len(asked) {
		t.Fatalf("payloads: %v after %d of %d", err, seen, len(asked))
	}
	if err := f.j.Payloads(nil, func(int, []byte, error) { t.Error("called for no msgid") }); err != nil {
		t.Fatalf("payloads of nothing: %v", err)
	}
}
