package etcdstore

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/store"
)

// Since format 5 a job's record lives in a slot: the etcd key
// PREFIX "slot/" N (N in base 36), its value the msgid (a uvarint of its
// length, then its bytes) and then the record. The journal above sees
// jobs/MSGID as ever; the shadow's item of a job says its slot, and
// the transaction that stores a job picks it (place):
//
//   - a job stored before keeps its slot (a rewrite is a put over it);
//   - a new job takes the slot of a job that the same transaction
//     deletes, so the put over it is the delete too: a job's life costs
//     one put, not a put and a delete;
//   - else a new slot, one above the highest the journal has used;
//   - a job put and deleted within one transaction costs nothing.
//
// A slot freed by a transaction that stores no new job is deleted in it.
// A batch's writes come in clumps (appends, then completes), so a write
// that puts a new job joins a transaction of its wave that frees a slot,
// and one that frees a slot a transaction that puts a new job (mark); a
// transaction's operations are counted as place will send them. A job
// stored at jobs/MSGID by format 4 stays there until it ends.
//
// A batch with more Completes than Appends would still delete the slots
// left over. Its surplus Completes (as many as the last batches'
// Appends) wait instead for the Appends of the batches after, for about
// HoldCompletes (store.CoreOptions.HoldCompletes; not while the journal
// holds workflows): with one sender, each job's Complete rides on the
// next job's commit, and a job's life costs one put and its commit's
// compare.
//
// The slot of a stored job is the shadow's (sitem.slot), so a view reads
// a job's value at its revision from the slot it had then. The standby's
// copy learns slots from its watch: a put over a slot is the end of the
// job there before (its previous value names it), and the start of the
// one put.

var slotBucket = []byte("slot")

// slotKey is slot n's etcd key.
func (e *Journal) slotKey(n uint64) string {
	return e.opts.Prefix + string(slotBucket) + "/" + strconv.FormatUint(n, 36)
}

// slotOf returns the slot a shadow key names (a key of the slot bucket).
func slotOf(key []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(key), 36, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: %q is not a slot", store.ErrCorrupt, key)
	}
	return n, nil
}

// wrapJob is a slot's value: the job's msgid, then its record.
func wrapJob(msgid, rec []byte) string {
	var b strings.Builder
	b.Grow(binary.MaxVarintLen64 + len(msgid) + len(rec))
	var n [binary.MaxVarintLen64]byte
	b.Write(n[:binary.PutUvarint(n[:], uint64(len(msgid)))])
	b.Write(msgid)
	b.Write(rec)
	return b.String()
}

// unwrapJob splits a slot's value into the msgid and the record.
func unwrapJob(v []byte) (msgid, rec []byte, err error) {
	n, w := binary.Uvarint(v)
	if w <= 0 || n == 0 || n > uint64(len(v)-w) {
		return nil, nil, fmt.Errorf("%w: a slot's value does not start with a msgid", store.ErrCorrupt)
	}
	return v[w : w+int(n)], v[w+int(n):], nil
}

// place turns a transaction's puts and deletes of jobs/MSGID into those
// of their slots (see above), and returns the slot of each job it puts
// in one (by etcd key) for the shadow. ops name each key once.
func (e *Journal) place(ops []clientv3.Op) ([]clientv3.Op, map[string]uint64) {
	jobs := e.jobsPrefix
	out := make([]clientv3.Op, 0, len(ops))
	slots := map[string]uint64{}
	var free []uint64 // freed by the deletes
	var fresh []int   // the new jobs' puts
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, op := range ops {
		k := string(op.KeyBytes())
		if !strings.HasPrefix(k, jobs) {
			out = append(out, op)
			continue
		}
		it, stored := e.shadow.Get(&sitem{key: e.rel(k)})
		switch {
		case !stored && op.IsDelete(): // put and deleted in one transaction, or never stored
		case !stored:
			fresh = append(fresh, i)
		case it.slot == 0: // format 4's key
			out = append(out, op)
		case op.IsDelete():
			free = append(free, it.slot)
		default:
			slots[k] = it.slot
			out = append(out, clientv3.OpPut(e.slotKey(it.slot), wrapJob([]byte(k[len(jobs):]), op.ValueBytes())))
		}
	}
	for _, i := range fresh {
		var n uint64
		if len(free) > 0 {
			n, free = free[len(free)-1], free[:len(free)-1]
		} else {
			e.lastSlot++
			n = e.lastSlot
		}
		k := string(ops[i].KeyBytes())
		slots[k] = n
		out = append(out, clientv3.OpPut(e.slotKey(n), wrapJob([]byte(k[len(jobs):]), ops[i].ValueBytes())))
	}
	for _, n := range free {
		out = append(out, clientv3.OpDelete(e.slotKey(n)))
	}
	return out, slots
}

// where is the etcd key that holds key's value for t, and the msgid its
// value starts with (nil: the value is the key's own, unwrapped).
func (t *etcdTx) where(key string) (string, []byte) {
	jobs := t.e.jobsPrefix
	if !strings.HasPrefix(key, jobs) {
		return key, nil
	}
	if it, ok := t.lookup(key); ok && it.slot != 0 {
		return t.e.slotKey(it.slot), []byte(key[len(jobs):])
	}
	return key, nil
}
