package boltstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/store/wal"
)

// flipIn changes one bit in the middle of every place the file holds
// marker, as a failing disk does, and fails unless there is one.
func flipIn(t testing.TB, file string, marker []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; ; n++ {
		k := bytes.Index(b[i:], marker)
		if k < 0 {
			break
		}
		b[i+k+len(marker)/2] ^= 0x04
		i += k + len(marker)
	}
	if n == 0 {
		t.Fatalf("%s does not hold %q", file, marker)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// twenty is 20 jobs, one of them the victim of the disk, whose payload
// is the marker flipIn looks for.
func twenty() (jobs map[string][]byte, victim string, marker []byte) {
	jobs = map[string][]byte{}
	for i := range 20 {
		jobs[fmt.Sprintf("job-%02d", i)] = []byte(fmt.Sprintf("payload of job %02d", i))
	}
	victim, marker = "job-10", []byte("the one payload the disk changed")
	jobs[victim] = marker
	return jobs, victim, marker
}

// without is jobs without the one msgid.
func without(jobs map[string][]byte, id string) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range jobs {
		if k != id {
			out[k] = v
		}
	}
	return out
}

// Check of a journal with nothing wrong is OK, whether it was stopped
// (everything in bbolt) or killed (records in the log after the
// checkpoint), and it counts what it read.
func TestCheckOfASoundJournalIsOK(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobs, _, _ := twenty()
	stopped := filepath.Join(dir, "stopped", "journal.db")
	intoFile(t, stopped, func(j *boltstore.Journal) { appendAll(t, j, jobs) })
	rep, err := boltstore.Check(stopped)
	if err != nil || !rep.OK() || rep.Jobs != len(jobs) || rep.Values < 2*len(jobs) || rep.Records != 0 {
		t.Fatalf("check of a stopped journal: %+v, %v; want OK with %d jobs in bbolt, nothing in the log", rep, err, len(jobs))
	}

	live, killed := filepath.Join(dir, "live", "journal.db"), filepath.Join(dir, "killed", "journal.db")
	j := openWith(t, live, smallSegments(t))
	appendAll(t, j, jobs)
	snapshot(t, live, killed)
	closeOK(t, j)
	rep, err = boltstore.Check(killed)
	if err != nil || !rep.OK() || rep.Records == 0 || rep.Torn != nil {
		t.Fatalf("check of a killed journal: %+v, %v; want OK with records in its log", rep, err)
	}
}

// A bit of a job's value changed in bbolt's file is found by Check,
// named by bucket and key, and makes the report not OK.
func TestCheckNamesAValueThatFailsItsChecksum(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	jobs, victim, marker := twenty()
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, jobs) })
	flipIn(t, path, marker)

	rep, err := boltstore.Check(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Damaged) != 1 || string(rep.Damaged[0].Bucket) != "jobs" || string(rep.Damaged[0].Key) != victim {
		t.Fatalf("check after a flipped bit in %s: OK=%v, damaged %v; want jobs/%s named", victim, rep.OK(), rep.Damaged, victim)
	}
	if len(rep.Structure) != 0 || len(rep.LogDamage) != 0 {
		t.Fatalf("a changed value reported as more: structure %q, log %v", rep.Structure, rep.LogDamage)
	}
}

// A record changed in the middle of the log of a killed journal (valid
// records after it: damage, not a torn write). Check names the segment;
// a plain Open refuses, naming it; Salvage writes every other job into a
// new journal that opens and checks OK, and lists what it lost; Open
// with Recover serves every other job and starts its log anew, so that
// the next plain Open works.
func TestDamageInTheMiddleOfTheLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	live := filepath.Join(dir, "live", "journal.db")
	damaged := filepath.Join(dir, "damaged", "journal.db")
	jobs, victim, marker := twenty()
	j := openWith(t, live, smallSegments(t))
	for i := range 20 { // a record each, the victim's in the middle
		id := fmt.Sprintf("job-%02d", i)
		appendAll(t, j, map[string][]byte{id: jobs[id]})
	}
	snapshot(t, live, damaged) // killed: all of it in the log
	closeOK(t, j)
	segs := logSegments(t, damaged)
	if len(segs) != 1 {
		t.Fatalf("the log has %d segments, want 1", len(segs))
	}
	segment := filepath.Base(segs[0])
	flipIn(t, segs[0], marker)
	good := without(jobs, victim)
	// Each case works on its own copy of the damaged journal.
	copyOf := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "journal.db")
		snapshot(t, damaged, path)
		return path
	}

	t.Run("check names the segment", func(t *testing.T) {
		rep, err := boltstore.Check(copyOf(t))
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() || len(rep.LogDamage) != 1 || rep.LogDamage[0].File != segment || rep.Records != len(good) {
			t.Fatalf("check: OK=%v, log damage %v, %d records; want %s named, the %d other records read", rep.OK(), rep.LogDamage, rep.Records, segment, len(good))
		}
	})
	t.Run("open refuses", func(t *testing.T) {
		j, err := boltstore.Open(copyOf(t), smallSegments(t))
		if err == nil {
			j.Close()
		}
		if !errors.Is(err, store.ErrCorrupt) || !errors.Is(err, wal.ErrDamaged) || !strings.Contains(err.Error(), segment) {
			t.Fatalf("open of a damaged log: %v; want ErrCorrupt naming %s", err, segment)
		}
	})
	t.Run("salvage keeps the rest", func(t *testing.T) {
		to := filepath.Join(t.TempDir(), "salvaged", "journal.db")
		rep, err := boltstore.Salvage(copyOf(t), to)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Jobs != len(good) || len(rep.Lost) != 1 || !strings.Contains(rep.Lost[0], segment) {
			t.Fatalf("salvage: %d jobs, lost %q; want %d jobs, the damaged stretch of %s named", rep.Jobs, rep.Lost, len(good), segment)
		}
		if crep, err := boltstore.Check(to); err != nil || !crep.OK() {
			t.Fatalf("check of the salvaged journal: %+v, %v", crep, err)
		}
		j := openWith(t, to, smallSegments(t))
		assertHolds(t, "salvaged", j, good)
		closeOK(t, j)
		if crep, err := boltstore.Check(to); err != nil || !crep.OK() {
			t.Fatalf("check of the salvaged journal once opened: %+v, %v", crep, err)
		}
	})
	t.Run("recover serves the rest, then plain opens work", func(t *testing.T) {
		path := copyOf(t)
		ropts := smallSegments(t)
		ropts.Recover = true
		j := openWith(t, path, ropts)
		if cuts := j.Recovered(); len(cuts) != 1 || cuts[0].File != segment {
			t.Errorf("recovered: %v; want the stretch of %s", cuts, segment)
		}
		assertHolds(t, "recovered", j, good)
		after := map[string][]byte{"after": []byte("appended after the recovery")}
		appendAll(t, j, after)
		closeOK(t, j)
		want := maps.Clone(good)
		want["after"] = after["after"]
		if rep, err := boltstore.Check(path); err != nil || !rep.OK() {
			t.Fatalf("check after the recovery: %+v, %v", rep, err)
		}
		j = openWith(t, path, smallSegments(t))
		assertHolds(t, "opened without Recover", j, want)
		closeOK(t, j)
	})
}

// Check reads the tenants' settings and the limiters as every other
// bucket: their values are counted, and one the disk changed is named.
func TestCheckReadsTenantsAndLimiters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	marker := "a-limiter-whose-name-the-disk-changed"
	intoFile(t, path, func(j *boltstore.Journal) {
		if _, err := store.Wait(func(done func(struct{}, error)) {
			j.PutLimiter(marker, store.LimiterSettings{Concurrency: 7}, func(err error) { done(struct{}{}, err) })
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Wait(func(done func(struct{}, error)) {
			j.PutTenantSettings("q", "acme", store.TenantSettings{Weight: 2}, func(err error) { done(struct{}{}, err) })
		}); err != nil {
			t.Fatal(err)
		}
	})
	rep, err := boltstore.Check(path)
	if err != nil || rep.Values < 2 {
		t.Fatalf("check: %+v, %v; want the two values read", rep, err)
	}
	values := rep.Values
	flipIn(t, path, []byte(marker))
	rep, err = boltstore.Check(path)
	if err != nil || rep.OK() || len(rep.Damaged) != 1 || string(rep.Damaged[0].Bucket) != "limiters" || rep.Values != values {
		t.Fatalf("check after a flipped bit in the limiter: %+v, %v; want limiters/%s named", rep, err, marker)
	}
}
