package storetest

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// listFixture stores 25 jobs over queues a, b and ab, interleaved, and
// buries a's 1st, 4th and 7th (in append order, so the dead list's order
// is the same whichever a backend keeps). It returns the msgids per queue
// and state, in order.
func listFixture(f *fixture) (pending, dead map[string][]string) {
	f.t.Helper()
	pending, dead = map[string][]string{}, map[string][]string{}
	var jobs []*store.Job
	for i := range 25 {
		q := []string{"a", "b", "ab"}[i%3]
		id := scrambledID(i)
		jobs = append(jobs, job(id, q))
		if q == "a" && i%9 == 0 {
			dead[q] = append(dead[q], id)
		} else {
			pending[q] = append(pending[q], id)
		}
	}
	f.appendAtOnce(jobs...)
	for _, id := range dead["a"] {
		f.bury(id, "boom")
	}
	return pending, dead
}

// Listing one queue in one state pages through every job once, in order,
// each as Get gives it, whatever the page size.
func listPagesInOrder(t *testing.T, f *fixture) {
	pending, dead := listFixture(f)
	for _, limit := range []int{1, 3, 4, 8, 9} { // b holds 8 pending jobs: one page ends exactly at its end
		for _, c := range []struct {
			queue string
			state store.State
			want  []string
		}{
			{"a", store.Pending, pending["a"]},
			{"b", store.Pending, pending["b"]},
			{"ab", store.Pending, pending["ab"]},
			{"a", store.Dead, dead["a"]},
			{"b", store.Dead, nil},
		} {
			got := f.list(store.ListOptions{Queue: c.queue, State: c.state, Limit: limit})
			if !reflect.DeepEqual(ids(got), append([]string{}, c.want...)) {
				t.Errorf("list of %s %s, %d a page: %v; want %v", c.queue, c.state, limit, ids(got), c.want)
			}
			for _, j := range got {
				if d := diffJob(j, f.get(j.MsgID)); d != "" {
					t.Errorf("listed %s differs from get: %s", j.MsgID, d)
				}
			}
		}
	}
}

// A listing without a state gives the pending jobs, then the dead ones,
// across pages; with a queue, that queue's.
func listPendingThenDead(t *testing.T, f *fixture) {
	pending, dead := listFixture(f)
	got := f.list(store.ListOptions{Limit: 4})
	if len(got) != 25 {
		t.Fatalf("list of everything gave %d jobs, want 25: %v", len(got), ids(got))
	}
	var gotPending, gotDead []*store.Job
	for i, j := range got {
		switch {
		case j.State == store.Pending && len(gotDead) > 0:
			t.Fatalf("list of everything gave pending %s (at %d) after a dead job", j.MsgID, i)
		case j.State == store.Pending:
			gotPending = append(gotPending, j)
		default:
			gotDead = append(gotDead, j)
		}
	}
	if p := byQueue(gotPending); !reflect.DeepEqual(p, pending) {
		t.Errorf("pending of the listing of everything %v; want %v", p, pending)
	}
	if d := byQueue(gotDead); !reflect.DeepEqual(d, dead) {
		t.Errorf("dead of the listing of everything %v; want %v", d, dead)
	}
	want := append(append([]string{}, pending["a"]...), dead["a"]...)
	for _, limit := range []int{2, 7, 100} {
		if got := ids(f.list(store.ListOptions{Queue: "a", Limit: limit})); !reflect.DeepEqual(got, want) {
			t.Errorf("list of queue a, %d a page: %v; want %v", limit, got, want)
		}
	}
}

// Limit 0 means pages of 100.
func listLimitZero(t *testing.T, f *fixture) {
	var jobs []*store.Job
	for i := range 150 {
		jobs = append(jobs, job(fmt.Sprintf("m%03d", i), "q"))
	}
	f.appendAtOnce(jobs...)
	first, err := f.j.List(store.ListOptions{Queue: "q"})
	if err != nil || len(first.Jobs) != 100 || first.Next == "" {
		t.Fatalf("first page without a limit: %d jobs, next %q, %v; want 100 and a next", len(first.Jobs), first.Next, err)
	}
	second, err := f.j.List(store.ListOptions{Queue: "q", After: first.Next})
	if err != nil || len(second.Jobs) != 50 || second.Next != "" {
		t.Fatalf("second page without a limit: %d jobs, next %q, %v; want the last 50", len(second.Jobs), second.Next, err)
	}
	if got := ids(append(first.Jobs, second.Jobs...)); !reflect.DeepEqual(got, ids(jobs)) {
		t.Fatalf("two pages without a limit: %v", got)
	}
}

// A cursor no listing gave, one of the other state, or a state that does
// not exist, is ErrBadFilter.
func listRefusesForeignCursors(t *testing.T, f *fixture) {
	f.appendAtOnce(job("p1", "q"), job("p2", "q"), job("d1", "q"), job("d2", "q"))
	f.bury("d1", "boom")
	f.bury("d2", "boom")
	deadPage, err := f.j.List(store.ListOptions{State: store.Dead, Limit: 1})
	if err != nil || deadPage.Next == "" {
		t.Fatalf("first page of 1 dead job: next %q, %v", deadPage.Next, err)
	}
	pendingPage, err := f.j.List(store.ListOptions{State: store.Pending, Limit: 1})
	if err != nil || pendingPage.Next == "" {
		t.Fatalf("first page of 1 pending job: next %q, %v", pendingPage.Next, err)
	}
	for what, opts := range map[string]store.ListOptions{
		"a made-up cursor":                   {After: "nonsense"},
		"a made-up cursor of binary":         {After: "\x00\xff\x01", State: store.Pending},
		"a dead cursor, listing pending":     {After: deadPage.Next, State: store.Pending},
		"a pending cursor, listing dead":     {After: pendingPage.Next, State: store.Dead},
		"a state that does not exist":        {State: store.State(9)},
		"a cursor with a state that is none": {After: pendingPage.Next, State: store.State(9)},
	} {
		f.refused("list with "+what, store.ErrBadFilter, func() error {
			p, err := f.j.List(opts)
			if err == nil {
				return fmt.Errorf("no error, a page of %v", ids(p.Jobs))
			}
			return err
		})
	}
	// Each cursor still works with the listing it came from.
	if got := ids(f.list(store.ListOptions{State: store.Dead, After: deadPage.Next})); !reflect.DeepEqual(got, []string{"d2"}) {
		t.Errorf("dead after the first dead page: %v; want [d2]", got)
	}
	if got := ids(f.list(store.ListOptions{After: pendingPage.Next})); !reflect.DeepEqual(got, []string{"p2", "d1", "d2"}) {
		t.Errorf("everything after the first pending page: %v; want [p2 d1 d2]", got)
	}
}

// Counts gives the pending and dead jobs of every queue that holds any.
func countsPerQueueAndState(t *testing.T, f *fixture) {
	if got := f.counts(); len(got) != 0 {
		t.Fatalf("counts of an empty journal: %v", got)
	}
	f.appendAtOnce(job("a1", "a"), job("b1", "b"), job("a2", "a"), job("ab1", "ab"), job("b2", "b"),
		job("a3", "a"), job("c1", "c"), job("a4", "a"), job("ab2", "ab"))
	f.bury("a2", "boom")
	f.bury("b1", "boom")
	f.bury("b2", "boom")
	f.complete("c1", nil, time.Time{})
	want := map[string]store.Count{
		"a":  {Queue: "a", Pending: 3, Dead: 1},
		"b":  {Queue: "b", Dead: 2},
		"ab": {Queue: "ab", Pending: 2},
	}
	if got := f.counts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("counts %v; want %v", got, want)
	}
	f.reopen()
	if got := f.counts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("counts after a reopen %v; want %v", got, want)
	}
}

// Filters keep the jobs that match every one set, in listing order, with
// paging; MaxScan ends a page early with a cursor that goes on, and the
// pages together still give every match once.
func listFilters(t *testing.T, f *fixture) {
	const n = 3000 // thousands of jobs, pending, dead and done
	base := time.Unix(1800000000, 0)
	var all []*store.Job
	for i := range n {
		j := job(fmt.Sprintf("id-%04d", i), []string{"mail", "reports"}[i%2])
		j.Headers = []string{"timeout:5", "timeout:5,tenant:acme", "tenant:zeta,retry-count:2"}[i%3]
		j.Enqueued = base.Add(time.Duration(i) * time.Minute)
		all = append(all, j)
	}
	f.appendAtOnce(all...)
	for i := 0; i < n; i += 4 { // every fourth dead, with an error that says which
		reason := "smtp: 550 mailbox unavailable"
		if i%8 == 0 {
			reason = "timed out after 5s"
		}
		f.bury(all[i].MsgID, reason)
	}
	stateOf := func(i int) store.State {
		switch {
		case i%4 == 0:
			return store.Dead
		case i%5 == 0:
			return store.Done
		}
		return store.Pending
	}
	b := f.batch()
	for i := range n { // every fifth of the rest done, kept with its result
		if stateOf(i) == store.Done {
			f.j.Complete(all[i].MsgID, []byte("ok"), time.Now().Add(time.Hour), nil, b.flag("complete "+all[i].MsgID, true))
		}
	}
	b.wait()
	ids := func(jobs []*store.Job) string {
		var s []string
		for _, j := range jobs {
			s = append(s, j.MsgID)
		}
		return strings.Join(s, " ")
	}
	want := func(keep func(i int, j *store.Job) bool, state store.State) string {
		var out []*store.Job
		for _, s := range []store.State{store.Pending, store.Dead, store.Done} { // listing order: pending, dead; done only asked for
			if state == 0 && s == store.Done || state != 0 && s != state {
				continue
			}
			for i, j := range all {
				if stateOf(i) == s && keep(i, j) {
					out = append(out, j)
				}
			}
		}
		return ids(out)
	}
	// Listing order is per queue: "mail" jobs come before "reports" ones.
	byQueue := func(s string) string {
		var mail, reports []string
		for _, id := range strings.Fields(s) {
			var k int
			fmt.Sscanf(id, "id-%d", &k)
			if k%2 == 0 {
				mail = append(mail, id)
			} else {
				reports = append(reports, id)
			}
		}
		return strings.Join(append(mail, reports...), " ")
	}
	for _, c := range []struct {
		name string
		opts store.ListOptions
		keep func(i int, j *store.Job) bool
	}{
		{"error text", store.ListOptions{State: store.Dead, Error: "550"}, func(i int, _ *store.Job) bool { return i%8 != 0 }},
		{"header key", store.ListOptions{Header: "tenant"}, func(i int, _ *store.Job) bool { return i%3 != 0 }},
		{"header item", store.ListOptions{Header: "tenant:acme"}, func(i int, _ *store.Job) bool { return i%3 == 1 }},
		{"header value is not a key", store.ListOptions{Header: "acme"}, func(int, *store.Job) bool { return false }},
		{"header key is whole", store.ListOptions{Header: "time"}, func(int, *store.Job) bool { return false }},
		{"msgid prefix", store.ListOptions{MsgIDPrefix: "id-01"}, func(i int, _ *store.Job) bool { return i >= 100 && i < 200 }},
		{"age", store.ListOptions{EnqueuedAfter: base.Add(999 * time.Minute), EnqueuedBefore: base.Add(1300 * time.Minute)},
			func(i int, _ *store.Job) bool { return i > 999 && i < 1300 }},
		{"all together, small pages, small scans", store.ListOptions{Header: "tenant", EnqueuedBefore: base.Add(400 * time.Minute), Limit: 7, MaxScan: 50},
			func(i int, _ *store.Job) bool { return i%3 != 0 && i < 400 }},
		{"rare matches", store.ListOptions{State: store.Dead, Error: "timed out", MsgIDPrefix: "id-2", MaxScan: 100},
			func(i int, _ *store.Job) bool { return i%8 == 0 && i >= 2000 }},
		{"done, by header and age, in small pages", store.ListOptions{State: store.Done, Header: "tenant:acme", EnqueuedAfter: base.Add(100 * time.Minute), Limit: 4},
			func(i int, _ *store.Job) bool { return i%3 == 1 && i > 100 }},
	} {
		state := c.opts.State
		got := ids(f.list(c.opts))
		var exp string
		if state == 0 {
			pending := byQueue(want(c.keep, store.Pending))
			dead := byQueue(want(c.keep, store.Dead))
			exp = strings.TrimSpace(pending + " " + dead)
		} else {
			exp = byQueue(want(c.keep, state))
		}
		if got != exp {
			t.Errorf("%s: listed\n  %s\nwant\n  %s", c.name, got, exp)
		}
	}
	// Without payloads: the same jobs, their sizes but not their bytes.
	lean := f.list(store.ListOptions{State: store.Dead, Error: "550", NoPayloads: true})
	if got, full := ids(lean), ids(f.list(store.ListOptions{State: store.Dead, Error: "550"})); got != full {
		t.Fatalf("NoPayloads listed\n  %s\nnot\n  %s", got, full)
	}
	if j := lean[0]; j.Payload != nil || j.PayloadSize != len("payload of "+j.MsgID) {
		t.Fatalf("NoPayloads: payload %q, size %d", j.Payload, j.PayloadSize)
	}
	// A scan budget smaller than the run of non-matching jobs still ends.
	p, err := f.j.List(store.ListOptions{MsgIDPrefix: "nothing", MaxScan: 5})
	if err != nil || len(p.Jobs) != 0 || p.Next == "" {
		t.Fatalf("a page cut by MaxScan: %d jobs, next %q, %v", len(p.Jobs), p.Next, err)
	}
}
