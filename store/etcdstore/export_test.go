package etcdstore

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/store"
)

// AppliedAnyway is appliedAnyway, for the tests.
func (e *Journal) AppliedAnyway(ops []clientv3.Op) (applied, known bool) {
	applied, known, _ = e.appliedAnyway(ops)
	return applied, known
}

// Shadow is every key the journal's shadow holds, with what it keeps of
// the value.
func (e *Journal) Shadow() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]string{}
	e.shadow.Ascend(func(it *sitem) bool {
		out[it.key] = fmt.Sprintf("%v %q slot %d", it.whole, it.val, it.slot)
		return true
	})
	return out
}

// UnwrapJob is unwrapJob, for the tests.
func UnwrapJob(v []byte) (msgid, rec []byte, err error) { return unwrapJob(v) }

// Batch runs fn as one batch of the journal's writes, beside its
// committer: for tests of an idle journal only.
func (e *Journal) Batch(fn func(t store.Tx, mark func() error) error) error {
	return etcdKV{e}.Update(fn, true)
}

// Record is what the journal stores for a job (its record).
func (e *Journal) Record(msgid string) (rec []byte, err error) {
	err = etcdKV{e}.View(func(t store.Tx) error {
		rec = t.Get(store.BucketJobs, []byte(msgid))
		return nil
	})
	return rec, err
}
