package boltstore_test

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// A journal closed right after it opened (the file's check still
// running) still writes its last checkpoint, and reports no damage in a
// sound file.
func TestCloseRightAfterOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	var damage atomic.Int64
	for i := range 20 {
		opts := boltstore.DefaultOptions()
		opts.OnDamage = func(store.Damage) { damage.Add(1) }
		j := openWith(t, path, opts)
		appendAll(t, j, numbered(i, i+1))
		closeOK(t, j)
		if rep, err := boltstore.Check(path); err != nil || !rep.OK() || rep.Records != 0 {
			t.Fatalf("close %d: %+v, %v; want every record in the file", i, rep, err)
		}
	}
	if n := damage.Load(); n != 0 {
		t.Fatalf("%d damage reports about a sound file", n)
	}
}

// A file of an older schema is not read as if its values had checksums:
// check, salvage and a read-only open say to upgrade it first; its
// schema is still told.
func TestOlderSchemaIsUpgradedBeforeItIsRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	intoFile(t, path, func(j *boltstore.Journal) { appendAll(t, j, numbered(0, 3)) })
	toVersion5(t, path)
	if rep, err := boltstore.Check(path); err != nil || rep.OK() || len(rep.Structure) != 1 ||
		!strings.Contains(rep.Structure[0], "emq migrate up") || len(rep.Damaged) != 0 {
		t.Fatalf("check of a version 5 file: %+v, %v; want one line saying to upgrade it", rep, err)
	}
	if _, err := boltstore.Salvage(path, filepath.Join(t.TempDir(), "new.db")); !errors.Is(err, boltstore.ErrOlder) {
		t.Fatalf("salvage of a version 5 file: %v, want ErrOlder", err)
	}
	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	if _, err := boltstore.Open(path, opts); !errors.Is(err, boltstore.ErrOlder) {
		t.Fatalf("read-only open of a version 5 file: %v, want ErrOlder", err)
	}
	if v, _, err := boltstore.Migrations(path); err != nil || v != 5 {
		t.Fatalf("Migrations: %d, %v; want 5", v, err)
	}
	j := openWith(t, path, boltstore.DefaultOptions()) // the upgrade
	defer closeOK(t, j)
	assertHolds(t, "upgraded", j, numbered(0, 3))
}
