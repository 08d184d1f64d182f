package storetest

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// Results of completed jobs, kept for a while so that a client can fetch
// one it missed and a resent REQUEST is not run again.

// Complete with a keepUntil keeps the result, byte for byte (empty is a
// result too), until that time; without one, nothing is kept. A result
// whose time is up is gone at once, before any ExpireResults.
func completeKeepsResult(t *testing.T, f *fixture) {
	f.appendAtOnce(job("kept", "q"), job("empty", "q"), job("expired", "q"), job("plain", "q"))
	now := time.Now()
	f.complete("kept", []byte{'4', '2', 0, 0xff}, now.Add(time.Hour))
	f.complete("empty", nil, now.Add(time.Hour))
	f.complete("expired", []byte("old"), now.Add(-time.Second))
	f.complete("plain", []byte("not kept"), time.Time{})
	for range 2 {
		if r := f.result("kept"); string(r) != "42\x00\xff" {
			t.Errorf("result of kept: %q", r)
		}
		if r := f.result("empty"); len(r) != 0 {
			t.Errorf("result of empty: %q", r)
		}
		f.noResult("expired")
		f.noResult("plain")
		f.noResult("unknown")
		f.reopen()
	}
}

// ExpireResults removes exactly the results whose time is up at the time
// it is given, and returns how many. A result stored again for a msgid
// that ran again is the new one, not the expired one.
func expireResultsRemovesExpired(t *testing.T, f *fixture) {
	f.appendAtOnce(job("e1", "q"), job("e2", "q"), job("l1", "q"), job("l2", "q"), job("again", "q"))
	now := time.Now()
	f.complete("e1", []byte("e1"), now.Add(-2*time.Second))
	f.complete("e2", []byte("e2"), now.Add(-time.Second))
	f.complete("l1", []byte("l1"), now.Add(time.Hour))
	f.complete("l2", []byte("l2"), now.Add(2*time.Hour))
	// again ran, its result expired, and it ran again.
	f.complete("again", []byte("first"), now.Add(-time.Second))
	f.append(job("again", "q"))
	f.complete("again", []byte("second"), now.Add(3*time.Hour))

	if n := f.expire(time.Now()); n != 2 {
		t.Errorf("expire now removed %d, want 2 (e1, e2)", n)
	}
	f.noResult("e1")
	f.noResult("e2")
	for _, id := range []string{"l1", "l2"} {
		if r := f.result(id); string(r) != id {
			t.Errorf("result of %s after expiring: %q", id, r)
		}
	}
	if r := f.result("again"); string(r) != "second" {
		t.Errorf("result of again after expiring: %q, want second", r)
	}
	f.unchanged("expire with nothing expired", func() {
		if n := f.expire(time.Now()); n != 0 {
			t.Errorf("second expire removed %d, want 0", n)
		}
	}, "l1", "l2", "again")
	if n := f.expire(now.Add(90 * time.Minute)); n != 1 {
		t.Errorf("expire 90 minutes on removed %d, want 1 (l1)", n)
	}
	f.noResult("l1")
	if r := f.result("l2"); string(r) != "l2" {
		t.Errorf("result of l2 after expiring l1: %q", r)
	}
	if r := f.result("again"); string(r) != "second" {
		t.Errorf("result of again after expiring l1: %q, want second", r)
	}
}

// A resent job whose result is kept is a duplicate: the client gets the
// result, the job does not run again. Once the result is gone, or when
// none was kept, the msgid is free.
func keptResultMakesDuplicate(t *testing.T, f *fixture) {
	f.appendAtOnce(job("kept", "q"), job("expired", "q"), job("plain", "q"), job("swept", "q"))
	now := time.Now()
	f.complete("kept", []byte("r"), now.Add(time.Hour))
	f.complete("expired", []byte("r"), now.Add(-time.Second))
	f.complete("plain", []byte("r"), time.Time{})
	f.complete("swept", []byte("r"), now.Add(time.Hour))
	f.unchanged("append of a job done with its result kept", func() {
		if !f.appendDup(job("kept", "q")) {
			t.Error("append of a job done with its result kept: not a duplicate")
		}
	}, "kept")
	// Before any ExpireResults: an expired result no longer counts.
	for _, id := range []string{"expired", "plain"} {
		if f.appendDup(job(id, "q")) {
			t.Errorf("append of %s, done without a result kept: a duplicate", id)
		}
	}
	if n := f.expire(now.Add(90 * time.Minute)); n != 3 {
		t.Errorf("expire removed %d, want 3 (expired, kept, swept)", n)
	}
	if f.appendDup(job("swept", "q")) {
		t.Error("append of swept, its result expired by ExpireResults: a duplicate")
	}
	if got, want := f.pending(), map[string][]string{"q": {"expired", "plain", "swept"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("pending %v; want %v", got, want)
	}
}

// A job completed with a keep time stays, done: listable in its own
// state with its attempts and the time it was done, counted, and gone
// with its result when ExpireResults sweeps it. Without a keep time it
// is deleted. Load never gives a done job, and Remove deletes one.
func doneJobsAreKept(t *testing.T, f *fixture) {
	f.appendAtOnce(job("a", "q"), job("b", "q"), job("c", "q"), job("gone", "q"))
	f.attempt("a", "flaky", time.Time{})
	before := time.Now()
	f.complete("a", []byte("ra"), before.Add(time.Hour))
	f.complete("b", []byte("rb"), before.Add(2*time.Hour))
	f.complete("gone", nil, time.Time{})
	f.reopen()
	a := f.get("a")
	if a.State != store.Done || a.Attempts != 1 || a.LastError != "flaky" || a.Finished.Before(before.Add(-time.Second)) || !a.NotBefore.IsZero() {
		t.Fatalf("a done job: %+v", a)
	}
	if string(a.Payload) != "payload of a" || string(f.result("a")) != "ra" {
		t.Fatalf("a done job keeps its payload and result: %q %q", a.Payload, f.result("a"))
	}
	f.gone("gone")
	done := f.list(store.ListOptions{State: store.Done})
	if len(done) != 2 || done[0].MsgID != "a" || done[1].MsgID != "b" {
		t.Fatalf("done listing: %v", done)
	}
	if all := f.list(store.ListOptions{}); len(all) != 1 || all[0].MsgID != "c" {
		t.Fatalf("a listing without state lists pending and dead only: %v", all)
	}
	if c := f.counts()["q"]; c.Pending != 1 || c.Done != 2 || c.Dead != 0 {
		t.Fatalf("counts: %+v", c)
	}
	if got, want := f.pending(), map[string][]string{"q": {"c"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("load: %v; want %v", got, want)
	}
	for what, write := range map[string]func(done func(*store.Job, error)){
		"bury":    func(done func(*store.Job, error)) { f.j.Bury("b", "late", nil, done) },
		"attempt": func(done func(*store.Job, error)) { f.j.RecordAttempt("b", "late", time.Time{}, nil, done) },
	} {
		f.refused(what+" of a done job", store.ErrWrongState, func() error {
			_, err := store.Wait(write)
			return err
		}, "b")
	}
	if !f.remove("b") {
		t.Fatal("remove of a done job: not found")
	}
	f.gone("b")
	f.noResult("b")
	if f.appendDup(job("b", "q")) { // its msgid is free again
		t.Fatal("append of a removed done job's msgid: a duplicate")
	}
	f.remove("b")
	if n := f.expire(before.Add(90 * time.Minute)); n != 1 {
		t.Fatalf("expire removed %d, want 1 (a)", n)
	}
	f.gone("a")
	if c := f.counts()["q"]; c.Done != 0 {
		t.Fatalf("counts after the sweep: %+v", c)
	}
}

// A job's trail keeps the events its changes brought, oldest first, in
// order, across a reopen; only the last MaxTrail, each reason cut at
// MaxTrailReason bytes.
func trailsAreKept(t *testing.T, f *fixture) {
	f.appendAtOnce(job("t", "q"), job("long", "q"))
	at := time.Unix(1800000000, 0)
	ev := func(kind string, attempt int, reason string) store.TrailEvent {
		at = at.Add(time.Second)
		return store.TrailEvent{Time: at, Kind: kind, Worker: "backend/w", Attempt: attempt, Reason: reason}
	}
	first := []store.TrailEvent{ev("dispatched", 1, ""), ev("failed", 1, "disk full"), ev("retry", 1, "")}
	jobWrite := func(what string, write func(done func(*store.Job, error))) { f.t.Helper(); f.jobWrite(what, write) }
	jobWrite("attempt", func(done func(*store.Job, error)) { f.j.RecordAttempt("t", "disk full", time.Time{}, first, done) })
	second := []store.TrailEvent{ev("dispatched", 2, ""), ev("failed", 2, "disk full")}
	jobWrite("bury", func(done func(*store.Job, error)) { f.j.Bury("t", "disk full", second, done) })
	third := []store.TrailEvent{ev("revived", 0, "")}
	jobWrite("revive", func(done func(*store.Job, error)) { f.j.Revive("t", third, done) })
	last := []store.TrailEvent{ev("dispatched", 1, ""), ev("replied", 1, "")}
	if _, err := store.Wait(func(done func(bool, error)) {
		f.j.Complete("t", []byte("ok"), time.Now().Add(time.Hour), last, done)
	}); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	want := append(append(append(first, second...), third...), last...)
	got := f.get("t").Trail
	if len(got) != len(want) {
		t.Fatalf("trail of %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !got[i].Time.Equal(want[i].Time) || got[i].Kind != want[i].Kind || got[i].Worker != want[i].Worker ||
			got[i].Attempt != want[i].Attempt || got[i].Reason != want[i].Reason {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// Bounded: a job that fails for ever keeps its last MaxTrail events.
	for i := range store.MaxTrail + 8 {
		reason := fmt.Sprintf("failure %d", i)
		if i == store.MaxTrail+7 {
			reason = strings.Repeat("x", store.MaxTrailReason+100)
		}
		jobWrite("attempt", func(done func(*store.Job, error)) {
			f.j.RecordAttempt("long", reason, time.Time{}, []store.TrailEvent{ev("failed", i+1, reason)}, done)
		})
	}
	tr := f.get("long").Trail
	if len(tr) != store.MaxTrail || tr[0].Reason != "failure 8" || len(tr[len(tr)-1].Reason) > store.MaxTrailReason+len("…") {
		t.Fatalf("a long trail: %d events, first %q, last reason %d bytes", len(tr), tr[0].Reason, len(tr[len(tr)-1].Reason))
	}
}
