package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
)

// Keys is a new key ring of the keys named, the first encrypting (a
// backend's encrypted run of the suite).
func Keys(t testing.TB, names ...string) *store.Keyring {
	t.Helper()
	var lines strings.Builder
	for _, n := range names {
		line, err := store.NewJournalKey(n)
		if err != nil {
			t.Fatal(err)
		}
		lines.WriteString(line)
	}
	k, err := store.ParseKeyring("test-keys", []byte(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// SealedDamageQuarantined is what a backend's test of damaged sealed
// values checks once j is opened over them: job "p" (whose payload's tag
// fails, its headers want) and the kept result of job "r" (whose tag
// fails). The damage is heard on heard, the result read is ErrDamaged,
// and p goes to the dead letters and r's result to the damaged bucket.
func SealedDamageQuarantined(t *testing.T, j store.Journal, heard <-chan store.Damage, headers string) {
	t.Helper()
	if d := testutil.Recv(t, heard, "the damage heard"); string(d.Key) != "p" || !strings.Contains(d.Reason, "authentication tag (key k1)") {
		t.Fatalf("damage heard: %+v", d)
	}
	if r, err := j.Result("r"); !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("result of a damaged value: %q, %v; want ErrDamaged", r, err)
	}
	testutil.Eventually(t, "the job in the dead letters, the result in the damaged bucket", func() bool {
		got, err := j.Get("p")
		list, lerr := j.(store.Quarantined).Damaged()
		results := slices.ContainsFunc(list, func(e store.DamagedEntry) bool { return e.Bucket == "results" && e.Key == "r" })
		return err == nil && got.State == store.Dead && strings.Contains(got.LastError, "damaged in the journal") &&
			strings.Contains(got.LastError, "authentication tag (key k1)") && got.Headers == headers && lerr == nil && results
	})
}
