package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// backuper is the journal as a Backuper; every backend's is.
func (f *fixture) backuper(j store.Journal) store.Backuper {
	f.t.Helper()
	b, ok := j.(store.Backuper)
	if !ok {
		f.t.Fatalf("the journal %T is not a store.Backuper", j)
	}
	return b
}

// A backup restored into empty storage gives the journal as it was:
// every job in its state and order (pending, waiting, dead, done with its
// result, cancelled), schedules, queue controls, tenants' settings,
// limiters, unique keys, batches; a job appended afterwards goes to its
// queue's tail. A damaged or cut
// backup is refused before anything is written.
func backupRestoresEverything(t *testing.T, f *fixture) {
	f.append(job("p1", "q"), job("p2", "q"), job("d", "q"), job("done", "q"), job("x", "other"))
	f.bury("d", "broken")
	f.complete("done", []byte("result"), time.Now().Add(time.Hour))
	f.append(uniqueJob("u", "q", "key-1", time.Hour), after("w", "q", "p1"))
	batched := job("b1", "q")
	batched.Batch = "nightly"
	f.append(batched)
	f.cancel("x", time.Now().Add(time.Hour))
	if _, err := store.Wait(func(done func(bool, error)) {
		f.j.PutSchedule(&store.Schedule{ID: "s", Queue: "q", Every: time.Minute, Payload: []byte("tick"), Next: time.Now().Add(time.Minute), Left: -1}, done)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Wait(func(done func(struct{}, error)) {
		f.j.PutQueueSettings("q", store.QueueSettings{Concurrency: 3}, func(err error) { done(struct{}{}, err) })
	}); err != nil {
		t.Fatal(err)
	}
	tenants := map[string]map[string]store.TenantSettings{"q": {"acme": {Concurrency: ptr(2), Weight: 3}, "": {Rate: ptr(0.0)}}}
	for tenant, s := range tenants["q"] {
		if err := f.putTenant("q", tenant, s); err != nil {
			t.Fatal(err)
		}
	}
	limiters := map[string]store.LimiterSettings{"stripe-api": {Rate: 25, Burst: 5}}
	if err := f.putLimiter("stripe-api", limiters["stripe-api"]); err != nil {
		t.Fatal(err)
	}
	want := f.snapshot("done")
	wantLoad := f.pending()

	var buf bytes.Buffer
	st, err := f.backuper(f.j).Backup(&buf, store.BackupHeader{MadeBy: "storetest"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs != 8 || st.Bytes != int64(buf.Len()) {
		t.Fatalf("backup: %+v, %d bytes written", st, buf.Len())
	}
	if got, err := store.CheckBackup(bytes.NewReader(buf.Bytes())); err != nil || got.Sum != st.Sum || got.Records != st.Records || got.Header.MadeBy != "storetest" {
		t.Fatalf("check of the backup: %+v, %v; want %+v", got, err, st)
	}

	// Into fresh storage, checked first: damaged and cut copies refused.
	target := &fixture{t: t, opts: f.opts, h: f.h, open: f.h.Fresh(t, f.opts)}
	target.j = target.mustOpen()
	defer func() { target.j.Close() }()
	if empty, err := f.backuper(target.j).Empty(); err != nil || !empty {
		t.Fatalf("a fresh journal: empty %v, %v", empty, err)
	}
	damaged := bytes.Clone(buf.Bytes())
	damaged[len(damaged)/2] ^= 0x40
	for name, b := range map[string][]byte{"damaged": damaged, "cut": buf.Bytes()[:buf.Len()-7], "empty": nil} {
		if _, err := store.CheckBackup(bytes.NewReader(b)); !errors.Is(err, store.ErrBadBackup) {
			t.Errorf("a %s backup: %v; want ErrBadBackup", name, err)
		}
	}
	// Restore itself checks before it writes: nothing of a damaged one.
	if _, err := f.backuper(target.j).Restore(bytes.NewReader(damaged), false); !errors.Is(err, store.ErrBadBackup) || errors.Is(err, store.ErrPartialRestore) {
		t.Fatalf("restore of a damaged backup: %v; want ErrBadBackup, nothing written", err)
	}
	if empty, err := f.backuper(target.j).Empty(); err != nil || !empty {
		t.Fatalf("after a damaged backup's restore: empty %v, %v", empty, err)
	}
	// One that changes after Restore checked it (a file replaced) is not
	// taken for the one checked: the error says what was written stays.
	_, err = f.backuper(target.j).Restore(&changing{Reader: bytes.NewReader(buf.Bytes()), then: damaged}, false)
	if !errors.Is(err, store.ErrPartialRestore) {
		t.Fatalf("restore of a backup damaged after its check: %v; want ErrPartialRestore", err)
	}
	// Replacing what it holds (part of the backup, or nothing) is asked.
	if _, err := f.backuper(target.j).Restore(bytes.NewReader(buf.Bytes()), true); err != nil {
		t.Fatalf("restore: %v", err)
	}
	// A journal that holds something is replaced only when asked, and
	// only by a backup that is whole: a damaged one leaves it as it was.
	if _, err := f.backuper(target.j).Restore(bytes.NewReader(buf.Bytes()), false); !errors.Is(err, store.ErrNotEmpty) {
		t.Fatalf("restore into a journal that holds a backup: %v; want ErrNotEmpty", err)
	}
	if _, err := f.backuper(target.j).Restore(bytes.NewReader(damaged), true); !errors.Is(err, store.ErrBadBackup) {
		t.Fatalf("replace with a damaged backup: %v; want ErrBadBackup", err)
	}
	target.reopen()
	if got := target.snapshot("done"); got != want {
		t.Fatalf("restored:\n%s\nwant\n%s", got, want)
	}
	if got := target.pending(); fmt.Sprint(got) != fmt.Sprint(wantLoad) {
		t.Fatalf("restored load %v; want %v", got, wantLoad)
	}
	if empty, _ := f.backuper(target.j).Empty(); empty {
		t.Fatal("a restored journal says it is empty")
	}
	target.append(job("new", "q"))
	if q := target.pending()["q"]; !slices.Equal(q, append(slices.Clone(wantLoad["q"]), "new")) {
		t.Fatalf("a job appended after the restore: queue %v; want it at the tail", q)
	}
	if s, err := target.j.GetSchedule("s"); err != nil || string(s.Payload) != "tick" {
		t.Fatalf("restored schedule: %+v, %v", s, err)
	}
	if b, err := target.j.GetBatch("nightly"); err != nil || b.Pending != 1 {
		t.Fatalf("restored batch: %+v, %v", b, err)
	}
	target.duplicate(uniqueJob("u2", "q", "key-1", 0), "u")
	if got := target.tenantSettings(); !reflect.DeepEqual(got, tenants) {
		t.Fatalf("restored tenant settings: %s; want %s", tenantsString(got), tenantsString(tenants))
	}
	if got := target.limiters(); !reflect.DeepEqual(got, limiters) {
		t.Fatalf("restored limiters: %+v; want %+v", got, limiters)
	}
}

// A backup of more bytes than one write holds (etcd: one request) is
// restored in as many writes as it takes: 120 jobs of 20 KiB. A paced
// backup ends when its journal closes.
func backupRestoresLargeJobs(t *testing.T, f *fixture) {
	var ids []string
	for i := range 120 {
		j := job(fmt.Sprintf("big%03d", i), "q")
		j.Payload = bytes.Repeat([]byte{byte(i)}, 20<<10)
		f.append(j)
		ids = append(ids, j.MsgID)
	}
	var buf bytes.Buffer
	if _, err := f.backuper(f.j).Backup(&buf, store.BackupHeader{MadeBy: "storetest"}); err != nil {
		t.Fatal(err)
	}
	target := &fixture{t: t, opts: f.opts, h: f.h, open: f.h.Fresh(t, f.opts)}
	target.j = target.mustOpen()
	defer func() { target.j.Close() }()
	if _, err := f.backuper(target.j).Restore(bytes.NewReader(buf.Bytes()), false); err != nil {
		t.Fatalf("restore of %d bytes: %v", buf.Len(), err)
	}
	if q := target.pending()["q"]; !slices.Equal(q, ids) {
		t.Fatalf("restored queue: %d jobs; want %d", len(q), len(ids))
	}
	if got, err := target.j.Get("big119"); err != nil || len(got.Payload) != 20<<10 || got.Payload[0] != 119 {
		t.Fatalf("a restored job: %v", err)
	}

	// A paced backup (here 1 KiB/s: 40 minutes) ends when its journal
	// closes, rather than hold the close for it.
	w := &signalWriter{at: 1 << 20, reached: make(chan struct{})}
	ended := make(chan error, 1)
	go func() {
		_, err := f.backuper(target.j).Backup(w, store.BackupHeader{Pace: 1 << 10})
		ended <- err
	}()
	<-w.reached
	if err := target.j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a paced backup when its journal closed: %v; want ErrClosed", err)
	}
	target.j = target.mustOpen()
}

// signalWriter takes everything, and closes reached once it has taken at
// bytes.
type signalWriter struct {
	n, at   int
	reached chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	before := w.n
	w.n += len(p)
	if before < w.at && w.n >= w.at {
		close(w.reached)
	}
	return len(p), nil
}

// changing reads one stream until it is rewound, then another: a backup
// file replaced between Restore's check and its writes.
type changing struct {
	*bytes.Reader
	then []byte
}

func (c *changing) Seek(off int64, whence int) (int64, error) {
	c.Reader = bytes.NewReader(c.then)
	return c.Reader.Seek(off, whence)
}
