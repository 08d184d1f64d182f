package boltstore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/store/storetest"
)

func openWithKeys(t testing.TB, path string, keys *store.Keyring) (*boltstore.Journal, error) {
	t.Helper()
	opts := boltstore.DefaultOptions()
	opts.Keys = keys
	j, err := boltstore.Open(path, opts)
	if err == nil {
		t.Cleanup(func() { j.Close() })
	}
	return j, err
}

// filesHolding names the files under dir whose bytes hold text.
func filesHolding(t testing.TB, dir, text string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(text)) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// With keys, no byte of any file of the journal's folder (the bbolt file,
// every log segment), before its checkpoint and after, nor of a backup,
// holds what users sent in payloads, headers, errors, results and
// schedules; and all of it reads back. Without keys the same writes are
// found (the scan sees what it looks for).
func TestEncryptedAtRestHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	const marker = "EMQ-PLAINTEXT-MARKER-4b1d"
	for _, keyed := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "journal.db")
		var keys *store.Keyring
		if keyed {
			keys = storetest.Keys(t, "k1")
		}
		j, err := openWithKeys(t, path, keys)
		if err != nil {
			t.Fatal(err)
		}
		check := storetest.Secrets(t, j, marker)
		if found := filesHolding(t, dir, marker); !keyed {
			if len(found) == 0 {
				t.Fatal("without keys the marker is in no file: the scan finds nothing")
			}
			continue
		} else if len(found) > 0 {
			t.Fatalf("before the checkpoint, the marker is in %v", found)
		}
		if err := j.CheckpointNow(); err != nil {
			t.Fatal(err)
		}
		if found := filesHolding(t, dir, marker); len(found) > 0 {
			t.Fatalf("after the checkpoint, the marker is in %v", found)
		}
		check(t, j)
		backup := filepath.Join(t.TempDir(), "backup")
		f, err := os.Create(backup)
		if err != nil {
			t.Fatal(err)
		}
		st, err := j.Backup(f, store.BackupHeader{})
		f.Close()
		if err != nil || st.Header.Format != store.BackupEncrypted || !slices.Equal(st.Header.Keys, []string{"k1"}) {
			t.Fatalf("backup: %+v, %v", st, err)
		}
		if found := filesHolding(t, filepath.Dir(backup), marker); len(found) > 0 {
			t.Fatalf("the backup holds the marker")
		}
		j.Close()
		if found := filesHolding(t, dir, marker); len(found) > 0 {
			t.Fatalf("after close, the marker is in %v", found)
		}
		rep, err := boltstore.Check(path)
		if err != nil || !rep.OK() || !slices.Equal(rep.EncryptedWith, []string{"k1"}) {
			t.Fatalf("check: %+v, %v", rep, err)
		}
		j, err = openWithKeys(t, path, keys)
		if err != nil {
			t.Fatal(err)
		}
		check(t, j)
	}
}

// resealed changes a stored value of a closed journal behind its back,
// and gives it its checksum again: only the authentication tag can tell.
func resealed(t *testing.T, path string, bucket []byte, key string, fn func(v []byte)) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		v, ok := store.Unseal(bucket, []byte(key), b.Get([]byte(key)))
		if !ok {
			t.Fatalf("%s/%s fails its checksum before the change", bucket, key)
		}
		v = bytes.Clone(v)
		fn(v)
		return b.Put([]byte(key), store.Seal(bucket, []byte(key), v))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A stored value whose bytes changed, checksum and all, fails its
// authentication tag: never served; the job goes to the dead letters
// ("damaged in the journal"), a result to the damaged bucket.
func TestEncryptedDamageIsQuarantined(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	keys := storetest.Keys(t, "k1")
	j, err := openWithKeys(t, path, keys)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, job("p", "q"), job("r", "q"), job("ok", "q"))
	if _, err := store.Wait(func(done func(bool, error)) {
		j.Complete("r", []byte("a result"), time.Now().Add(time.Hour), nil, done)
	}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	// A record ends with its payload's encrypted part, then its trail
	// (none: one byte); a result with its one encrypted part.
	resealed(t, path, store.BucketJobs, "p", func(v []byte) { v[len(v)-2] ^= 0x01 })
	resealed(t, path, store.BucketResults, "r", func(v []byte) { v[len(v)-1] ^= 0x01 })

	// emq journal check --journal-keys finds both, and counts the rest.
	rep := boltstore.CheckReport{}
	if err := boltstore.CheckSealed(path, keys, &rep); err != nil {
		t.Fatal(err)
	}
	var unsealed []string
	for _, d := range rep.Unsealed {
		unsealed = append(unsealed, string(d.Bucket)+"/"+string(d.Key))
	}
	if !slices.Equal(unsealed, []string{"jobs/p", "results/r"}) || rep.SealedBy["k1"] != 2 || len(rep.SealedBy) != 1 || rep.OK() {
		t.Fatalf("the check found unsealed %v, sealed by %v (ok %v); want jobs/p, results/r failing, ok and r's job under k1", unsealed, rep.SealedBy, rep.OK())
	}

	opts := boltstore.DefaultOptions()
	opts.Keys = keys
	heard := make(chan store.Damage, 4)
	opts.OnDamage = func(d store.Damage) { heard <- d }
	j, err = boltstore.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	// Load decrypts a job's head, not its payload: the job is loaded (its
	// payload's damage is found when it is read, as a dispatch reads it).
	if got := loadAll(t, j); len(got) != 2 || got[0].MsgID != "p" || got[0].PayloadSize != len("payload p") || got[0].Headers != "timeout:5" {
		t.Fatalf("loaded %v; want p (by its head) and ok", ids(got))
	}
	if err := j.Payloads([]string{"p", "ok"}, func(i int, p []byte, err error) {
		if i == 0 && !errors.Is(err, store.ErrDamaged) {
			t.Errorf("payload of the damaged job: %q, %v; want ErrDamaged", p, err)
		}
		if i == 1 && (err != nil || string(p) != "payload ok") {
			t.Errorf("payload of a good job: %q, %v", p, err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	storetest.SealedDamageQuarantined(t, j, heard, "timeout:5")
	for _, jb := range loadAll(t, j) {
		if jb.MsgID == "p" {
			t.Fatal("the damaged job was loaded as pending")
		}
	}
}

func keyring(t *testing.T, file string, lines ...string) *store.Keyring {
	t.Helper()
	k, err := store.ParseKeyring(file, []byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A journal opens only with every key it was ever encrypted with, each
// with its bytes: a key missing, removed, or of other bytes is refused,
// by its name and the file's.
func TestEncryptedJournalRefusesWrongKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	a, _ := store.NewJournalKey("a")
	a2, _ := store.NewJournalKey("a")
	b, _ := store.NewJournalKey("b")
	j, err := openWithKeys(t, path, keyring(t, "keys-a", a))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, job("under-a", "q"))
	j.Close()
	refused := func(what string, keys *store.Keyring, want ...string) {
		t.Helper()
		_, err := openWithKeys(t, path, keys)
		if !errors.Is(err, store.ErrKeys) {
			t.Fatalf("%s: %v; want ErrKeys", what, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %v; want it to name %q", what, err, w)
			}
		}
	}
	refused("no keys", nil, "keys a", path)
	refused("key a of other bytes", keyring(t, "keys-other", a2), "key a", "keys-other", "other bytes")
	refused("key a missing", keyring(t, "keys-b", b), "key a", "keys-b")
	// A new first key encrypts new values; the old one still opens.
	j, err = openWithKeys(t, path, keyring(t, "keys-ba", b, a))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, job("under-b", "q"))
	if got := ids(loadAll(t, j)); !slices.Equal(got, []string{"under-a", "under-b"}) {
		t.Fatalf("loaded %v", got)
	}
	if names, err := j.EncryptedWith(); err != nil || !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("encrypted with %v, %v", names, err)
	}
	j.Close()
	refused("key a removed", keyring(t, "keys-b", b), "key a", "keys-b")
	refused("key b missing", keyring(t, "keys-a", a), "key b", "keys-a")
}

// A journal never encrypted stays as it was without keys (no meta/keys,
// the schema the steps give); opened with keys, it encrypts what comes
// next, and the values from before stay readable in clear.
func TestEncryptionOfAJournalInClear(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	j := openJournal(t, path)
	mustAppend(t, j, &store.Job{MsgID: "old", Queue: "q", Payload: []byte("OLD-IN-CLEAR")})
	j.Close()
	if v, _, err := boltstore.Migrations(path); err != nil || v != migrations.Latest() {
		t.Fatalf("schema without keys: %d, %v; want %d", v, err, migrations.Latest())
	}
	if rep, err := boltstore.Check(path); err != nil || len(rep.EncryptedWith) != 0 {
		t.Fatalf("check without keys: %+v, %v", rep, err)
	}
	j, err := openWithKeys(t, path, storetest.Keys(t, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, &store.Job{MsgID: "new", Queue: "q", Payload: []byte("NEW-ENCRYPTED")})
	for _, id := range []string{"old", "new"} {
		if _, err := j.Get(id); err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
	}
	j.Close()
	if filesHolding(t, dir, "OLD-IN-CLEAR") == nil || filesHolding(t, dir, "NEW-ENCRYPTED") != nil {
		t.Fatal("the old value should stay in clear, the new one encrypted")
	}
	if v, _, err := boltstore.Migrations(path); err != nil || v != migrations.Encrypt.Version {
		t.Fatalf("schema with keys: %d, %v; want %d (an older binary refuses it)", v, err, migrations.Encrypt.Version)
	}
	if _, err := openWithKeys(t, path, nil); !errors.Is(err, store.ErrKeys) {
		t.Fatalf("opened without keys after: %v; want ErrKeys", err)
	}
}

// A backup of an encrypted journal restores only into a journal given its
// keys; with them, everything is back.
func TestEncryptedBackupRestoresOnlyWithItsKeys(t *testing.T) {
	t.Parallel()
	keys := storetest.Keys(t, "k1")
	j, err := openWithKeys(t, filepath.Join(t.TempDir(), "journal.db"), keys)
	if err != nil {
		t.Fatal(err)
	}
	check := storetest.Secrets(t, j, "BACKUP-MARKER")
	var buf bytes.Buffer
	if _, err := j.Backup(&buf, store.BackupHeader{}); err != nil {
		t.Fatal(err)
	}
	restore := func(keys *store.Keyring) (*boltstore.Journal, error) {
		into, err := openWithKeys(t, filepath.Join(t.TempDir(), "journal.db"), keys)
		if err != nil {
			t.Fatal(err)
		}
		_, err = into.Restore(bytes.NewReader(buf.Bytes()), false)
		return into, err
	}
	if into, err := restore(nil); !errors.Is(err, store.ErrKeys) || !strings.Contains(err.Error(), "k1") {
		t.Fatalf("restore without keys: %v; want ErrKeys naming k1", err)
	} else if empty, _ := into.Empty(); !empty {
		t.Fatal("a refused restore wrote into the journal")
	}
	other, _ := store.NewJournalKey("k1")
	if _, err := restore(keyring(t, "other", other)); !errors.Is(err, store.ErrKeys) || !strings.Contains(err.Error(), "k1") {
		t.Fatalf("restore with key k1 of other bytes: %v; want ErrKeys naming k1", err)
	}
	into, err := restore(keys)
	if err != nil {
		t.Fatal(err)
	}
	check(t, into)
	if names, err := into.EncryptedWith(); err != nil || !slices.Equal(names, []string{"k1"}) {
		t.Fatalf("restored journal encrypted with %v, %v", names, err)
	}
}

// emq journal salvage of an encrypted journal keeps its values encrypted
// and the names of its keys: the new journal opens only with them, and
// holds everything.
func TestSalvageOfAnEncryptedJournal(t *testing.T) {
	t.Parallel()
	keys := storetest.Keys(t, "k1")
	from := filepath.Join(t.TempDir(), "journal.db")
	j, err := openWithKeys(t, from, keys)
	if err != nil {
		t.Fatal(err)
	}
	check := storetest.Secrets(t, j, "SALVAGE-MARKER")
	j.Close()
	to := filepath.Join(t.TempDir(), "journal.db")
	if rep, err := boltstore.Salvage(from, to); err != nil || len(rep.Lost) != 0 {
		t.Fatalf("salvage: %+v, %v", rep, err)
	}
	if found := filesHolding(t, filepath.Dir(to), "SALVAGE-MARKER"); len(found) > 0 {
		t.Fatalf("the salvaged journal holds the marker in %v", found)
	}
	if _, err := openWithKeys(t, to, nil); !errors.Is(err, store.ErrKeys) {
		t.Fatalf("salvaged journal opened without keys: %v; want ErrKeys", err)
	}
	if v, _, err := boltstore.Migrations(to); err != nil || v != migrations.Encrypt.Version {
		t.Fatalf("salvaged journal's schema %d, %v", v, err)
	}
	j, err = openWithKeys(t, to, keys)
	if err != nil {
		t.Fatal(err)
	}
	check(t, j)
	j.Close()
	if rep, err := boltstore.Check(to); err != nil || !rep.OK() || !slices.Equal(rep.EncryptedWith, []string{"k1"}) {
		t.Fatalf("check of the salvaged journal: %+v, %v", rep, err)
	}
}

// Keys rotated online on bbolt (storetest.RekeyUnderLoad).
func TestRekeyUnderLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	storetest.RekeyUnderLoad(t, func(keys *store.Keyring) (store.Journal, error) {
		opts := boltstore.DefaultOptions()
		opts.Keys = keys
		return boltstore.Open(path, opts)
	})
}
