package storetest

import (
	"strings"
	"testing"

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
