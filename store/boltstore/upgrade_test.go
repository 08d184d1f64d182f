package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// toVersion5 turns the closed journal at path into the file EMQ wrote at
// schema version 5, before migration step 6 (commit 8ad46f3^): the same
// records, their values not sealed, the job sequence the jobs bucket's
// own, no checkpoint, no damaged bucket, and no log.
func toVersion5(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{store.BucketJobs, store.BucketPending, store.BucketDead, store.BucketResults,
			store.BucketResultExp, store.BucketSchedules, store.BucketQueues, store.BucketDone} {
			bkt := tx.Bucket(name)
			var keys, vals [][]byte
			err := bkt.ForEach(func(k, v []byte) error {
				val, ok := store.Unseal(name, k, v)
				if !ok {
					return fmt.Errorf("%s/%q is not sealed", name, k)
				}
				keys, vals = append(keys, bytes.Clone(k)), append(vals, bytes.Clone(val))
				return nil
			})
			if err != nil {
				return err
			}
			for i := range keys {
				if err := bkt.Put(keys[i], vals[i]); err != nil {
					return err
				}
			}
		}
		meta := tx.Bucket(store.BucketMeta)
		seq, ok := store.Unseal(store.BucketMeta, []byte("seq"), meta.Get([]byte("seq")))
		if !ok || len(seq) != 8 {
			return fmt.Errorf("meta/seq: %x", seq)
		}
		if err := tx.Bucket(store.BucketJobs).SetSequence(binary.BigEndian.Uint64(seq)); err != nil {
			return err
		}
		for _, k := range []string{"seq", "checkpoint"} {
			if err := meta.Delete([]byte(k)); err != nil {
				return err
			}
		}
		if err := tx.DeleteBucket(store.BucketDamaged); err != nil {
			return err
		}
		return meta.Put([]byte("schema"), []byte("5"))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("making a version 5 file: %v", err)
	}
	if err := os.RemoveAll(boltstore.LogDir(path)); err != nil {
		t.Fatal(err)
	}
}

// A file of schema version 5 (values without checksums) opens: step 6
// seals every value, and every job is as it was: pending ones in their
// order with their payloads, the dead one with its reason, the done one
// with its result; a new job lands after them (the sequence carried
// over); and the upgraded file checks OK.
func TestOpenUpgradesAVersion5File(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	pending := []string{"p1", "p2", "p3"}
	intoFile(t, path, func(j *boltstore.Journal) {
		for _, id := range append(pending, "dead", "done") {
			mustAppend(t, j, job(id, "q"))
		}
		if _, err := store.Wait(func(d func(*store.Job, error)) { j.Bury("dead", "broken for good", nil, d) }); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Wait(func(d func(bool, error)) {
			j.Complete("done", []byte("its result"), time.Now().Add(time.Hour), nil, d)
		}); err != nil {
			t.Fatal(err)
		}
	})
	toVersion5(t, path)

	j := openWith(t, path, smallSegments(t))
	if v, _, err := j.Migrations(); err != nil || v != migrations.Latest() {
		t.Fatalf("schema after open: %d, %v; want %d", v, err, migrations.Latest())
	}
	if got := ids(loadAll(t, j)); !slices.Equal(got, pending) {
		t.Fatalf("pending after the upgrade: %v, want %v", got, pending)
	}
	for _, id := range append(pending, "dead", "done") {
		got, err := j.Get(id)
		if err != nil || !bytes.Equal(got.Payload, job(id, "q").Payload) {
			t.Fatalf("job %s after the upgrade: %+v, %v", id, got, err)
		}
	}
	if got, err := j.Get("dead"); err != nil || got.State != store.Dead || got.LastError != "broken for good" {
		t.Fatalf("the dead job after the upgrade: %+v, %v", got, err)
	}
	if res, err := j.Result("done"); err != nil || string(res) != "its result" {
		t.Fatalf("the done job's result after the upgrade: %q, %v", res, err)
	}
	mustAppend(t, j, job("new", "q"))
	if got := ids(loadAll(t, j)); !slices.Equal(got, append(pending, "new")) {
		t.Fatalf("a job appended after the upgrade: pending %v; want it last", got)
	}
	closeOK(t, j)
	if rep, err := boltstore.Check(path); err != nil || !rep.OK() || rep.Jobs < 5 {
		t.Fatalf("check of the upgraded file: %+v, %v; want OK, the 5 jobs it held sealed", rep, err)
	}
}

// freelistWritten reads the current meta page of the bbolt file at path
// (of the two, the one with the higher transaction id) and reports
// whether it names a freelist page: bbolt's NoFreelistSync leaves none.
// bbolt's layout: a 16-byte page header, then magic, version, page size,
// flags (u32 each), the root bucket (16 bytes), the freelist's page id,
// the high-water page id, the transaction id (u64 each), little-endian.
func freelistWritten(t testing.TB, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(binary.LittleEndian.Uint32(b[16+8:]))
	var txid, freelist uint64
	for _, off := range []int{0, pageSize} {
		m := b[off+16:]
		if binary.LittleEndian.Uint32(m) != 0xED0CDAED {
			t.Fatalf("%s: no bbolt meta page at offset %d", path, off)
		}
		if id := binary.LittleEndian.Uint64(m[48:]); id >= txid {
			txid, freelist = id, binary.LittleEndian.Uint64(m[32:])
		}
	}
	return freelist != ^uint64(0)
}

// A journal file last written by bbolt with NoFreelistSync (another
// tool, an older EMQ) has no freelist on disk: it opens (walked first,
// where a damaged page would be an error, not a crash), serves its jobs,
// and once it has been written its freelist is on disk again.
func TestOpenFileWithoutItsFreelist(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	jobs := numbered(0, 100)
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, jobs) })
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { // a write of what is there: the freelist goes
		b := tx.Bucket(store.BucketJobs)
		return b.Put([]byte("job-0000"), bytes.Clone(b.Get([]byte("job-0000"))))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if freelistWritten(t, path) {
		t.Fatal("bbolt with NoFreelistSync left a freelist: not the file meant")
	}

	intoFile(t, path, func(j *boltstore.Journal) {
		assertHolds(t, "without its freelist", j, jobs)
		appendAll(t, j, numbered(100, 110))
	})
	if !freelistWritten(t, path) {
		t.Fatal("after a checkpoint the file still has no freelist on disk")
	}
	if rep, err := boltstore.Check(path); err != nil || !rep.OK() {
		t.Fatalf("check: %+v, %v", rep, err)
	}
	j := openWith(t, path, smallSegments(t))
	defer j.Close()
	assertHolds(t, "reopened", j, numbered(0, 110))
}
