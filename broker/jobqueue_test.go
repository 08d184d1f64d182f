package broker

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A queue's jobs come out by priority, lower first, FIFO among equals,
// with pushFront at the head of its priority and removed jobs never:
// random operations against a plain sorted list that does the same.
func TestJobQueueOrder(t *testing.T) {
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, seed))
		var q jobQueue
		var model []*job // in the order they must come out
		seq := 0
		prios := []uint16{0, 1, 5, 1024, 65535}[:1+r.IntN(5)]
		if seed%3 == 0 { // more than a queue keeps idle
			prios = nil
			for p := range uint16(200) {
				prios = append(prios, p*300)
			}
		}
		insert := func(j *job, front bool) {
			at := len(model)
			for i, m := range model {
				if m.prio > j.prio || front && m.prio == j.prio {
					at = i
					break
				}
			}
			model = slices.Insert(model, at, j)
		}
		for range 5000 {
			switch op := r.IntN(10); {
			case op < 4:
				seq++
				j := &job{prio: prios[r.IntN(len(prios))], seq: uint64(seq), state: pending}
				q.pushBack(j)
				insert(j, false)
			case op < 5:
				seq++
				j := &job{prio: prios[r.IntN(len(prios))], seq: uint64(seq), state: pending}
				q.pushFront(j)
				insert(j, true)
			case op < 8 && len(model) > 0:
				if q.front() != model[0] {
					t.Fatalf("seed %d: front is not the model's", seed)
				}
				j := q.popFront()
				if j != model[0] {
					t.Fatalf("seed %d: popped job %d (priority %d), want %d (priority %d)", seed, j.seq, j.prio, model[0].seq, model[0].prio)
				}
				model = model[1:]
			case op < 10 && len(model) > 0:
				i := r.IntN(len(model))
				q.remove(model[i])
				model = slices.Delete(model, i, i+1)
			}
			if q.len() != len(model) {
				t.Fatalf("seed %d: len %d, model %d", seed, q.len(), len(model))
			}
			if len(model) > 0 && q.oldest() == nil {
				t.Fatalf("seed %d: no oldest job", seed)
			}
		}
		for len(model) > 0 {
			if j := q.popFront(); j != model[0] {
				t.Fatalf("seed %d: draining, popped job %d, want %d", seed, j.seq, model[0].seq)
			}
			model = model[1:]
		}
		if q.len() != 0 || len(q.heap) != 0 {
			t.Fatalf("seed %d: drained, len %d with %d levels in the heap", seed, q.len(), len(q.heap))
		}
	}
}
