package store

import (
	"strings"
	"testing"
	"time"
)

// holdOver keeps a batch's Completes beyond its Appends for a later
// batch, from its end: at most as many as the Appends of this batch or
// the last (at least one), never past an Append of the same msgid or one
// that reads more than its own keys, never one first held longer ago
// than the hold; the rest keep their order.
func TestHoldOver(t *testing.T) {
	now := time.Unix(1000, 0)
	const hold = 100 * time.Millisecond
	// writes: "a:x" a plain Append of x, "u:x" an Append with a unique key,
	// "c:x" a Complete, "C:x" a Complete first held 200 ms ago, "h:x" one
	// held 10 ms ago, "w" another write.
	batch := func(spec string) []write {
		var b []write
		for _, s := range strings.Fields(spec) {
			kind, id, _ := strings.Cut(s, ":")
			w := write{job: id}
			if kind == "w" {
				w.job = "w"
			}
			switch kind {
			case "a":
				w.takes, w.plain = true, true
			case "u":
				w.takes = true
			case "c":
				w.frees = true
			case "C":
				w.frees, w.held = true, now.Add(-2*hold)
			case "h":
				w.frees, w.held = true, now.Add(-hold/10)
			}
			b = append(b, w)
		}
		return b
	}
	names := func(b []write) string {
		var s []string
		for _, w := range b {
			s = append(s, w.job)
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		batch      string
		before     int
		kept, held string
	}{
		{batch: "c:1", kept: "", held: "1"},                             // alone: held for the next Append
		{batch: "c:1 a:2", kept: "1 2", held: ""},                       // a pair
		{batch: "c:1 c:3 a:2", kept: "1 2", held: "3"},                  // one over
		{batch: "c:1 c:3 c:4 a:2", kept: "1 3 2", held: "4"},            // capped at this batch's Appends
		{batch: "c:1 c:3 c:4 a:2", before: 5, kept: "1 2", held: "3 4"}, // or the last batch's
		{batch: "c:1 c:3 a:3", kept: "1 3 3", held: ""},                 // not past its own msgid's Append
		{batch: "c:1 c:3 u:2", kept: "1 3 2", held: ""},                 // nor an Append with a unique key
		{batch: "c:1 w c:3", before: 5, kept: "1 w", held: "3"},         // nor another write
		{batch: "C:1 c:3", before: 5, kept: "1", held: "3"},             // one held too long goes
		{batch: "h:1 c:3", before: 5, kept: "", held: "1 3"},            // one held a while may stay
	} {
		b := batch(c.batch)
		want := strings.Count(c.batch, "a:") + strings.Count(c.batch, "u:")
		kept, held, appends := holdOver(b, nil, c.before, now, hold)
		if names(kept) != c.kept || names(held) != c.held || appends != want {
			t.Errorf("%q after %d Appends: kept %q, held %q, %d Appends; want %q, %q, %d",
				c.batch, c.before, names(kept), names(held), appends, c.kept, c.held, want)
		}
	}
	// A Complete held again keeps the time it was first held.
	if _, held, _ := holdOver(batch("h:1 c:3"), nil, 5, now, hold); !held[0].held.Equal(now.Add(-hold/10)) || !held[1].held.Equal(now) {
		t.Errorf("held since %v and %v; want %v (held again) and %v", held[0].held, held[1].held, now.Add(-hold/10), now)
	}
}
