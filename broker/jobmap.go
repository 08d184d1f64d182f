package broker

import "iter"

// jobMap is the jobs the broker holds in memory, by msgid. A msgid that is
// a UUID in its canonical lowercase text (what EMQ's clients and EventMQ's
// send) is kept as its 16 bytes, others as they are: a million jobs held
// then put no pointer in the map's keys for the garbage collector to
// follow at each of its cycles (with a million jobs stored, a collection
// took 2.3 times as long with the msgids as string keys:
// docs/benchmarks.md, issue 49).
type jobMap struct {
	uuids  map[[16]byte]*job
	others map[string]*job
}

func newJobMap() jobMap {
	return jobMap{uuids: make(map[[16]byte]*job), others: make(map[string]*job)}
}

func (m *jobMap) get(id string) *job {
	if u, ok := uuidKey(id); ok {
		return m.uuids[u]
	}
	return m.others[id]
}

func (m *jobMap) set(id string, j *job) {
	if u, ok := uuidKey(id); ok {
		m.uuids[u] = j
		return
	}
	m.others[id] = j
}

func (m *jobMap) del(id string) {
	if u, ok := uuidKey(id); ok {
		delete(m.uuids, u)
		return
	}
	delete(m.others, id)
}

func (m *jobMap) len() int { return len(m.uuids) + len(m.others) }

// all yields each job held with its msgid; the loop may delete it.
func (m *jobMap) all() iter.Seq2[string, *job] {
	return func(yield func(string, *job) bool) {
		for _, j := range m.uuids {
			if !yield(j.id, j) {
				return
			}
		}
		for id, j := range m.others {
			if !yield(id, j) {
				return
			}
		}
	}
}

// uuidKey is the 16 bytes of id when it is a UUID written as
// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in lowercase hex: one text for each
// 16 bytes, so two msgids never share a key.
func uuidKey(id string) (u [16]byte, ok bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return u, false
	}
	n := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := lowerHex(id[i])
		lo, ok2 := lowerHex(id[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[n] = hi<<4 | lo
		n++
		i += 2
	}
	return u, true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
