package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// emq keygen --journal writes a key file (mode 0600); a journal encrypted
// with it says so (emq journal check), and opens only with it: the
// broker and the offline tools refuse to start without it, or with a
// file that lacks it, naming the key and the file; a backup of it
// restores only with it.
func TestJournalKeysCLI(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	keys := filepath.Join(tmp, "journal.keys")
	mustEmq(t, "keygen", "--journal", "k1", "--to", keys)
	if fi, err := os.Stat(keys); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	if _, stderr, err := emq(t, "", "keygen", "--journal", "k1", "--to", keys); err == nil || !strings.Contains(stderr, "exists") {
		t.Fatalf("keygen over a key file: %v %s", err, stderr)
	}
	if _, stderr, err := emq(t, "", "keygen", "--journal", "no/slash"); err == nil || !strings.Contains(stderr, `key name "no/slash"`) {
		t.Fatalf("keygen of a bad name: %v %s", err, stderr)
	}
	other := filepath.Join(tmp, "other.keys")
	mustEmq(t, "keygen", "--journal", "k2", "--to", other)
	bad := filepath.Join(tmp, "bad.keys")
	os.WriteFile(bad, []byte("# keys\n\nk1 not-base64!\n"), 0o600)

	dir := t.TempDir()
	ring, err := store.ReadKeyring(keys)
	if err != nil {
		t.Fatal(err)
	}
	opts := boltstore.DefaultOptions()
	opts.Keys = ring
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Wait(func(d func(bool, error)) {
		j.Append(&store.Job{MsgID: "secret", Queue: "q", Payload: []byte("CLI-SECRET-PAYLOAD")}, d)
	}); err != nil {
		t.Fatal(err)
	}
	j.Close()

	if out := mustEmq(t, "journal", "check", "--data-dir", dir); !strings.Contains(out, "encrypted at rest: yes (keys k1)") {
		t.Fatalf("check of an encrypted journal:\n%s", out)
	}
	clear, _ := journalWithJobs(t)
	if out := mustEmq(t, "journal", "check", "--data-dir", clear); !strings.Contains(out, "encrypted at rest: no") {
		t.Fatalf("check of a journal in clear:\n%s", out)
	}
	broker := func(args ...string) string {
		t.Helper()
		_, stderr, err := emq(t, "", append([]string{"broker", "--data-dir", dir, "--admin", "",
			"--frontend", bt.FreeEndpoint(t), "--backend", bt.FreeEndpoint(t)}, args...)...)
		if err == nil {
			t.Fatalf("broker %v started", args)
		}
		return stderr
	}
	if stderr := broker(); !strings.Contains(stderr, "keys k1") {
		t.Fatalf("broker without keys: %s", stderr)
	}
	if stderr := broker("--journal-keys", other); !strings.Contains(stderr, "key k1") || !strings.Contains(stderr, other) {
		t.Fatalf("broker with a key file without k1: %s", stderr)
	}
	if stderr := broker("--journal-keys", bad); !strings.Contains(stderr, bad+": line 3") || !strings.Contains(stderr, "not base64") {
		t.Fatalf("broker with a bad key file: %s", stderr)
	}
	if _, stderr, err := emq(t, "", "jobs", "ls", "--data-dir", dir); err == nil || !strings.Contains(stderr, "keys k1") {
		t.Fatalf("jobs ls without keys: %v %s", err, stderr)
	}
	if out := mustEmq(t, "jobs", "ls", "--data-dir", dir, "--journal-keys", keys); !strings.Contains(out, "secret") {
		t.Fatalf("jobs ls with keys:\n%s", out)
	}

	backup := filepath.Join(tmp, "b.emqbackup")
	mustEmq(t, "backup", "--data-dir", dir, "--journal-keys", keys, "--to", backup)
	if raw, _ := os.ReadFile(backup); len(raw) == 0 || strings.Contains(string(raw), "CLI-SECRET-PAYLOAD") {
		t.Fatalf("the backup (%d bytes) holds the payload in clear", len(raw))
	}
	into := t.TempDir()
	if _, stderr, err := emq(t, "", "restore", "--from", backup, "--data-dir", into); err == nil || !strings.Contains(stderr, "keys k1") {
		t.Fatalf("restore without keys: %v %s", err, stderr)
	}
	if entries, _ := os.ReadDir(into); len(entries) != 0 {
		t.Fatalf("a refused restore wrote %d files", len(entries))
	}
	if _, stderr, err := emq(t, "", "restore", "--from", backup, "--data-dir", into, "--journal-keys", other); err == nil || !strings.Contains(stderr, "key k1") || !strings.Contains(stderr, other) {
		t.Fatalf("restore with a key file without k1: %v %s", err, stderr)
	}
	if entries, _ := os.ReadDir(into); len(entries) != 0 {
		t.Fatalf("a refused restore wrote %d files", len(entries))
	}
	mustEmq(t, "restore", "--from", backup, "--data-dir", into, "--journal-keys", keys)
	if out := mustEmq(t, "jobs", "show", "secret", "--payload", "--data-dir", into, "--journal-keys", keys); !strings.Contains(out, "CLI-SECRET-PAYLOAD") {
		t.Fatalf("the restored job:\n%s", out)
	}
}
