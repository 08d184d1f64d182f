package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// sealed is what a backend's journal tells of its keys (store.Core).
type sealed interface {
	KeyCounts(verify bool) (map[string]int64, []store.Damage, error)
	EncryptedWith() ([]string, error)
}

func keyCounts(t testing.TB, j store.Journal) map[string]int64 {
	t.Helper()
	counts, failed, err := j.(sealed).KeyCounts(true)
	if err != nil || len(failed) > 0 {
		t.Fatalf("KeyCounts: %v, failing: %v", err, failed)
	}
	return counts
}

// WaitRekey waits, up to a minute, until j's rekey has ended, and
// returns its status.
func WaitRekey(t testing.TB, j store.Journal) store.RekeyStatus {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s := j.RekeyStatus()
		if !s.Running && !s.Finished.IsZero() {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rekey has not ended in a minute: %s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RekeyUnderLoad is keys rotated online, for a backend's test: open opens
// its one journal with the keys given. A journal written under key
// "old" is opened with "new" first; while a writer appends and completes
// jobs, Rekey seals everything again under "new". Then every value is
// under "new", every job, result and schedule reads as written, the
// journal no longer names "old", and it opens with "new" alone. Before
// that, "old" is refused removal by name; and a rekey stopped half way
// (the journal closed) goes on when it opens again.
func RekeyUnderLoad(t *testing.T, open func(keys *store.Keyring) (store.Journal, error)) {
	keys := Keys(t, "old", "new")
	only := func(names ...string) *store.Keyring {
		k, err := keys.With(names...)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	oldOnly, newFirst, newOnly := only("old"), only("new", "old"), only("new")
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	j, err := open(oldOnly)
	must("open with old", err)
	check := Secrets(t, j, "EMQ-REKEY-MARKER")
	const stored = 600
	var want []*store.Job
	for i := range stored {
		jb := &store.Job{MsgID: fmt.Sprintf("r%04d", i), Queue: "rq", Headers: "h:" + fmt.Sprint(i), Payload: []byte(strings.Repeat("p", i%300))}
		_, err := store.Wait(func(done func(bool, error)) { j.Append(jb, done) })
		must("append", err)
		want = append(want, jb)
	}
	must("close", j.Close())

	// The new key first: what is written now is under it, what was
	// stored stays under old until the rekey.
	j, err = open(newFirst)
	must("open with new first", err)
	if err := j.SetKeys(newOnly); err == nil || !strings.Contains(err.Error(), "key old") {
		t.Fatalf("keys without old, which values are still under, are not refused by its name: %v", err)
	}
	if got := keyCounts(t, j); got["old"] == 0 || got["new"] != 0 {
		t.Fatalf("before the rekey: %v, want all under old", got)
	}

	// A rekey stopped half way goes on at the next open: paced to one
	// value a second it is still running when the journal closes (and a
	// new rate, below, ends its pause of minutes).
	_, err = j.Rekey(1)
	must("rekey", err)
	deadline := time.Now().Add(time.Minute)
	for j.RekeyStatus().Resealed == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the rekey sealed nothing in a minute: %s", j.RekeyStatus())
		}
		time.Sleep(5 * time.Millisecond)
	}
	must("close during the rekey", j.Close())
	j, err = open(newFirst)
	must("open again during the rekey", err)
	s := j.RekeyStatus()
	if !s.Running || s.Resealed == 0 {
		t.Fatalf("the rekey did not go on where it was at the open: %s", s)
	}
	// Its next step sealed, it waits minutes for the next at this rate.
	for resumed := s.Resealed; j.RekeyStatus().Resealed == resumed; {
		if time.Now().After(deadline) {
			t.Fatalf("the rekey resumed sealed nothing: %s", j.RekeyStatus())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Under load: a writer appends and completes while it goes on.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		written []string
		werr    error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			id := fmt.Sprintf("w%05d", i)
			jb := &store.Job{MsgID: id, Queue: "wq", Payload: []byte("load " + id)}
			if _, werr = store.Wait(func(done func(bool, error)) { j.Append(jb, done) }); werr != nil {
				return
			}
			if i%2 == 1 { // every other one done, its result kept
				prev := fmt.Sprintf("w%05d", i-1)
				if _, werr = store.Wait(func(done func(bool, error)) {
					j.Complete(prev, []byte("result "+prev), time.Now().Add(time.Hour), nil, done)
				}); werr != nil {
					return
				}
			}
			written = append(written, id)
		}
	}()
	_, err = j.Rekey(1_000_000) // the rest at once, not after the pause
	must("rekey faster", err)
	s = WaitRekey(t, j)
	stop.Store(true)
	wg.Wait()
	must("the load's writes", werr)
	if len(written) == 0 {
		t.Fatal("the load wrote nothing")
	}
	if !slices.Equal(s.Dropped, []string{"old"}) || s.Key != "new" {
		t.Fatalf("the rekey ended as %s, want old dropped under new", s)
	}

	// Every value under new, all of it as written.
	counts := keyCounts(t, j)
	if len(counts) != 1 || counts["new"] == 0 {
		t.Fatalf("after the rekey the values are under %v, want all under new", counts)
	}
	names, err := j.(sealed).EncryptedWith()
	must("EncryptedWith", err)
	if !slices.Equal(names, []string{"new"}) {
		t.Fatalf("after the rekey the journal names keys %v, want [new]", names)
	}
	for _, w := range want {
		got, err := j.Get(w.MsgID)
		must("get "+w.MsgID, err)
		if got.Headers != w.Headers || string(got.Payload) != string(w.Payload) {
			t.Fatalf("job %s after the rekey: %q %q, want %q %q", w.MsgID, got.Headers, got.Payload, w.Headers, w.Payload)
		}
	}
	for i, id := range written {
		got, err := j.Get(id)
		must("get "+id, err)
		if string(got.Payload) != "load "+id {
			t.Fatalf("job %s written during the rekey reads %q", id, got.Payload)
		}
		if i%2 == 0 && i+1 < len(written) {
			r, err := j.Result(id)
			must("result "+id, err)
			if string(r) != "result "+id {
				t.Fatalf("result of %s written during the rekey reads %q", id, r)
			}
		}
	}
	// What Secrets wrote reads as written, once the rest is gone.
	for _, id := range slices.Concat(written, ids(want)) {
		_, err := store.Wait(func(done func(bool, error)) { j.Remove(id, done) })
		must("remove "+id, err)
	}
	check(t, j)
	must("close", j.Close())

	// New alone opens it; old alone does not.
	j, err = open(newOnly)
	must("open with new alone after the rekey", err)
	check(t, j)
	must("close", j.Close())
	if _, err := open(oldOnly); err == nil || !strings.Contains(err.Error(), "key new") {
		t.Fatalf("opened with old alone: %v, want refused naming key new", err)
	}
}
