package broker

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A queue's jobs come out by priority, lower first; within a priority,
// by tenant in weighted turn (a tenant's turn gives up to its weight of
// jobs, then it goes to the back); FIFO within a tenant; pushFront puts a
// job at the head of its tenant's jobs, and that tenant first in turn if
// it had no jobs of that priority; removed jobs never come out. Random
// operations against a model made of plain slices that does the same.
func TestJobQueueOrder(t *testing.T) {
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, seed))
		b := &Broker{}
		q := &queue{name: "q"}
		prios := []uint16{0, 1, 5, 1024, 65535}[:1+r.IntN(5)]
		if seed%3 == 0 { // more than a queue keeps idle
			prios = nil
			for p := range uint16(200) {
				prios = append(prios, p*300)
			}
		}
		var tenants []*tenant
		for i := range 1 + r.IntN(6) {
			tn := &tenant{name: string(rune('a' + i)), q: q, weight: 1 + r.IntN(3)}
			tenants = append(tenants, tn)
			if q.tenants == nil {
				q.tenants = map[string]*tenant{}
			}
			q.tenants[tn.name] = tn
		}
		m := newFairModel()
		seq := 0
		newJob := func() *job {
			seq++
			return &job{q: q, prio: prios[r.IntN(len(prios))], seq: uint64(seq), state: pending, ten: tenants[r.IntN(len(tenants))]}
		}
		for range 5000 {
			switch op := r.IntN(10); {
			case op < 4:
				j := newJob()
				q.jobs.pushBack(j)
				m.push(j, false)
			case op < 5:
				j := newJob()
				q.jobs.pushFront(j)
				m.push(j, true)
			case op < 8 && m.size > 0:
				want := m.pop()
				j := b.take(q)
				if j != want {
					t.Fatalf("seed %d: took job %d (priority %d, tenant %s), want %d (priority %d, tenant %s)",
						seed, j.seq, j.prio, j.ten.name, want.seq, want.prio, want.ten.name)
				}
			case op < 10 && m.size > 0:
				j := m.any(r)
				q.jobs.remove(j)
				m.remove(j)
			}
			if q.jobs.len() != m.size {
				t.Fatalf("seed %d: len %d, model %d", seed, q.jobs.len(), m.size)
			}
			if m.size > 0 && b.oldest(q) == nil {
				t.Fatalf("seed %d: no oldest job", seed)
			}
		}
		for m.size > 0 {
			if j, want := b.take(q), m.pop(); j != want {
				t.Fatalf("seed %d: draining, took job %d, want %d", seed, j.seq, want.seq)
			}
		}
		if j := b.take(q); j != nil || q.jobs.len() != 0 || len(q.jobs.heap) != 0 {
			t.Fatalf("seed %d: drained, took %v, len %d with %d levels in the heap", seed, j, q.jobs.len(), len(q.jobs.heap))
		}
	}
}

// fairModel is dispatch order written the slow, plain way.
type fairModel struct {
	rings  map[uint16][]*tenant          // per priority, the tenants in turn
	lanes  map[uint16]map[*tenant][]*job // per priority and tenant, FIFO
	credit map[uint16]map[*tenant]int    // jobs left in the turn under way
	size   int
}

func newFairModel() *fairModel {
	return &fairModel{rings: map[uint16][]*tenant{}, lanes: map[uint16]map[*tenant][]*job{}, credit: map[uint16]map[*tenant]int{}}
}

func (m *fairModel) push(j *job, front bool) {
	p, tn := j.prio, j.ten
	if m.lanes[p] == nil {
		m.lanes[p], m.credit[p] = map[*tenant][]*job{}, map[*tenant]int{}
	}
	if len(m.lanes[p][tn]) == 0 {
		m.credit[p][tn] = 0
		if front {
			m.rings[p] = slices.Insert(m.rings[p], 0, tn)
		} else {
			m.rings[p] = append(m.rings[p], tn)
		}
	}
	if front {
		m.lanes[p][tn] = slices.Insert(m.lanes[p][tn], 0, j)
	} else {
		m.lanes[p][tn] = append(m.lanes[p][tn], j)
	}
	m.size++
}

func (m *fairModel) pop() *job {
	var p uint16
	found := false
	for prio, ring := range m.rings {
		if len(ring) > 0 && (!found || prio < p) {
			p, found = prio, true
		}
	}
	tn := m.rings[p][0]
	j := m.lanes[p][tn][0]
	m.lanes[p][tn] = m.lanes[p][tn][1:]
	if m.credit[p][tn] == 0 {
		m.credit[p][tn] = tn.weight
	}
	m.credit[p][tn]--
	switch {
	case len(m.lanes[p][tn]) == 0:
		m.rings[p] = m.rings[p][1:]
	case m.credit[p][tn] == 0:
		m.rings[p] = append(m.rings[p][1:], tn)
	}
	m.size--
	return j
}

func (m *fairModel) any(r *rand.Rand) *job {
	var all []*job
	for _, byTenant := range m.lanes {
		for _, l := range byTenant {
			all = append(all, l...)
		}
	}
	slices.SortFunc(all, func(a, b *job) int { return int(a.seq) - int(b.seq) })
	return all[r.IntN(len(all))]
}

func (m *fairModel) remove(j *job) {
	p, tn := j.prio, j.ten
	m.lanes[p][tn] = slices.DeleteFunc(m.lanes[p][tn], func(x *job) bool { return x == j })
	if len(m.lanes[p][tn]) == 0 {
		m.rings[p] = slices.DeleteFunc(m.rings[p], func(x *tenant) bool { return x == tn })
	}
	m.size--
}
