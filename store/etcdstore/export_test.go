package etcdstore

import (
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
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
