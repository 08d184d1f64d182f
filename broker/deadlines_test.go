package broker

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The heap gives back every scheduled deadline in time order, whatever
// mix of set, move, stop and purge came before; a stopped one never.
func TestDeadlinesKeepTimeOrder(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var h deadlines
		jobs := make([]*job, 200)
		for i := range jobs {
			jobs[i] = &job{seq: uint64(i)}
		}
		want := map[*job]int64{} // what should be scheduled, and when
		for range 2000 {
			j := jobs[rng.IntN(len(jobs))]
			switch op := rng.IntN(10); {
			case op < 6:
				at := rng.Int64N(1000)
				h.set(j, at)
				want[j] = at
			case op < 9:
				h.stop(j)
				delete(want, j)
			default:
				odd := func(x timed) bool { return x.(*job).seq%2 == 1 }
				h.removeIf(odd)
				for j := range want {
					if odd(j) {
						delete(want, j)
					}
				}
			}
		}
		if h.len() != len(want) {
			t.Fatalf("round %d: %d scheduled, want %d", round, h.len(), len(want))
		}
		var times []int64
		for _, at := range want {
			times = append(times, at)
		}
		slices.Sort(times)
		for i, at := range times {
			if next, _ := h.next(); next != at {
				t.Fatalf("round %d: deadline %d is at %d, want %d", round, i, next, at)
			}
			x, ok := h.popDue(at)
			if !ok || want[x.(*job)] != at || x.deadline().slot != 0 {
				t.Fatalf("round %d: popped %v (%v), want one due at %d", round, x, ok, at)
			}
		}
		if _, ok := h.popDue(1 << 62); ok {
			t.Fatalf("round %d: something left after every deadline was popped", round)
		}
	}
}

func TestDeadlinesNotDueStayPut(t *testing.T) {
	t.Parallel()
	var h deadlines
	j := &job{}
	h.set(j, 100)
	if _, ok := h.popDue(99); ok {
		t.Fatal("a deadline at 100 was due at 99")
	}
	h.stop(j)
	h.stop(j) // stopping twice is harmless
	if h.len() != 0 || j.due.slot != 0 {
		t.Fatal("stop left the deadline scheduled")
	}
}

// A peer heard since its deadline was set gets a new one after now,
// counted from how long it has really been silent (on the monotonic
// clock): never one that is due already, which would pop again at once.
func TestPeerDeadlineMovesPastNow(t *testing.T) {
	t.Parallel()
	opts := DefaultOptions()
	opts.DataDir, opts.OpenJournal = t.TempDir(), openBolt
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now()
	p := &peer{key: peerKey{backend, "w"}, role: peerWorker, lastSeen: now.Add(-opts.HeartbeatTimeout / 2)}
	b.peers[p.key] = p
	b.peerDue(p, now)
	if b.peers[p.key] == nil {
		t.Fatal("a peer silent for half the timeout was lost")
	}
	if got, want := p.due.at, b.at(now)+int64(opts.HeartbeatTimeout/2); got != want {
		t.Fatalf("new deadline %d, want %d (half a timeout from now)", got, want)
	}
}
