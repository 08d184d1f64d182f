package migrations_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
	bolt "go.etcd.io/bbolt"
)

func openDB(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestApplyIsOrderedAndIdempotent(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "j.db"))
	from, to, err := migrations.Apply(db)
	if err != nil || from != 0 || to != migrations.Latest() {
		t.Fatalf("Apply = %d, %d, %v", from, to, err)
	}
	from, to, err = migrations.Apply(db)
	if err != nil || from != to || to != migrations.Latest() {
		t.Fatalf("second Apply = %d, %d, %v; want nothing to do", from, to, err)
	}
	v, st, err := migrations.Check(db)
	if err != nil || v != migrations.Latest() || len(st) != len(migrations.Steps) || !st[len(st)-1].Applied {
		t.Fatalf("Check = %d, %v, %v", v, st, err)
	}
}

// The steps make every bucket of the layout (a checkpoint writes into
// each, and fails on one that is not there).
func TestStepsMakeEveryBucket(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "j.db"))
	if _, _, err := migrations.Apply(db); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		for _, b := range store.Buckets {
			if tx.Bucket(b) == nil {
				t.Errorf("no bucket %s after the migrations", b)
			}
		}
		return nil
	})
}

// A file made at version 1 gets step 2, and the data it held is carried
// into the new index.
func TestUpgradeCarriesDataOver(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "j.db")
	db := openDB(t, path)
	if _, to, err := migrations.ApplySteps(db, migrations.Steps[:1]); err != nil || to != 1 {
		t.Fatalf("making a version 1 file: %d, %v", to, err)
	}
	exp := store.ExpiryBytes(1234)
	err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketResults).Put([]byte("m1"), append(exp, "result"...))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, to, err := migrations.Apply(db); err != nil || to != migrations.Latest() {
		t.Fatalf("upgrade: %d, %v", to, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(store.BucketResultExp).Get(store.ResultExpKey(exp, []byte("m1"))); v == nil {
			return errors.New("the result is missing from the expiry index")
		}
		v, ok := store.Unseal(store.BucketResults, []byte("m1"), tx.Bucket(store.BucketResults).Get([]byte("m1")))
		if !ok || string(v[8:]) != "result" {
			return errors.New("the result itself changed, or is not sealed (step 6)")
		}
		if tx.Bucket(store.BucketSchedules) == nil {
			return errors.New("no schedules bucket after step 3")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "j.db"))
	future := append(append([]migrations.Step{}, migrations.Steps...), migrations.Encrypt, migrations.Step{
		Version: migrations.Known() + 1, Name: "from the future", Apply: func(*bolt.Tx) error { return nil },
	})
	if _, _, err := migrations.ApplySteps(db, future); err != nil {
		t.Fatal(err)
	}
	if _, _, err := migrations.Apply(db); !errors.Is(err, migrations.ErrTooNew) {
		t.Fatalf("Apply on a newer file: %v, want ErrTooNew", err)
	}
}

// A file that may hold encrypted values is refused by a binary that
// knows none (here: one whose steps end before Encrypt), and needs no
// migration of this one.
func TestEncryptedSchema(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "j.db"))
	if _, to, err := migrations.ApplyEncrypt(db); err != nil || to != migrations.Encrypt.Version {
		t.Fatalf("ApplyEncrypt: to %d, %v", to, err)
	}
	if from, to, err := migrations.Apply(db); err != nil || from != to || to != migrations.Encrypt.Version {
		t.Fatalf("Apply on an encrypted file: %d -> %d, %v", from, to, err)
	}
	var v int
	if err := db.View(func(tx *bolt.Tx) (err error) { v, err = migrations.Version(tx); return err }); err != nil || v <= migrations.Latest() {
		t.Fatalf("version %d, %v: an older binary (which knows up to Latest) would not refuse it", v, err)
	}
}

func TestFailedStepLeavesVersion(t *testing.T) {
	t.Parallel()
	db := openDB(t, filepath.Join(t.TempDir(), "j.db"))
	broken := append(append([]migrations.Step{}, migrations.Steps[:1]...), migrations.Step{
		Version: 2, Name: "breaks", Apply: func(tx *bolt.Tx) error {
			_, _ = tx.CreateBucket([]byte("half-done"))
			return errors.New("boom")
		},
	})
	if _, to, err := migrations.ApplySteps(db, broken); err == nil || to != 1 {
		t.Fatalf("broken step: to=%d err=%v; want an error at version 1", to, err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("half-done")) != nil {
			t.Error("a failed step left its changes")
		}
		return nil
	})
}

// Step 6 seals the values a chunk at a time; one interrupted after some
// chunks goes on where it stopped: every value ends sealed once, with
// what it held before.
func TestSealingResumes(t *testing.T) {
	defer migrations.SetSealChunk(4 << 10)()
	db := openDB(t, filepath.Join(t.TempDir(), "j.db"))
	if _, _, err := migrations.ApplySteps(db, migrations.Steps[:5]); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	err := db.Update(func(tx *bolt.Tx) error {
		for i := range 500 {
			k, v := fmt.Sprintf("job-%04d", i), fmt.Sprintf("record %d %s", i, bytes.Repeat([]byte("x"), i%90))
			want[k] = v
			if err := tx.Bucket(store.BucketJobs).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // then the process stops
		if finished, err := migrations.SealOne(db); err != nil || finished {
			t.Fatalf("a chunk: finished %v, %v", finished, err)
		}
	}
	if from, to, err := migrations.Apply(db); err != nil || from != 5 || to != migrations.Latest() {
		t.Fatalf("the upgrade resumed: %d → %d, %v", from, to, err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(store.BucketJobs).ForEach(func(k, v []byte) error {
			got, ok := store.Unseal(store.BucketJobs, k, v)
			if !ok || string(got) != want[string(k)] {
				t.Errorf("%s after the upgrade: %q (checksum ok %v), want %q", k, got, ok, want[string(k)])
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
