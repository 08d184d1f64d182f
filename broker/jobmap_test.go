package broker

import (
	"strings"
	"testing"

	"github.com/eventmq/emq/emqp"
)

// Every msgid finds its own job, and only its own: UUIDs in their
// canonical lowercase text by their bytes, any other text as it is, even
// one that names the same bytes (uppercase, braces).
func TestJobMapKeepsMsgidsApart(t *testing.T) {
	id := emqp.NewID()
	ids := []string{id, strings.ToUpper(id), "{" + id + "}", "urn:uuid:" + id, strings.ReplaceAll(id, "-", ""),
		"00000000-0000-0000-0000-000000000000", "0000000-00000-0000-0000-000000000000", "g0000000-0000-0000-0000-000000000000", "job-1", ""}
	m := newJobMap()
	for _, id := range ids {
		m.set(id, &job{id: id})
	}
	if m.len() != len(ids) {
		t.Fatalf("%d jobs held, want %d", m.len(), len(ids))
	}
	for _, id := range ids {
		if j := m.get(id); j == nil || j.id != id {
			t.Errorf("get(%q) = %v", id, j)
		}
	}
	if _, ok := uuidKey(id); !ok {
		t.Errorf("%s: not kept by its bytes", id)
	}
	seen := map[string]bool{}
	for id, j := range m.all() {
		if id != j.id || seen[id] {
			t.Errorf("all: %q for the job of %q, or twice", id, j.id)
		}
		seen[id] = true
		m.del(id) // the loop deletes as it goes (purge)
	}
	if len(seen) != len(ids) || m.len() != 0 {
		t.Errorf("all yielded %d of %d; %d left after deleting each", len(seen), len(ids), m.len())
	}
}
