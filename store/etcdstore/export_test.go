package etcdstore

import clientv3 "go.etcd.io/etcd/client/v3"

// AppliedAnyway is appliedAnyway, for the tests.
func (e *Journal) AppliedAnyway(ops []clientv3.Op) (applied, known bool) {
	applied, known, _ = e.appliedAnyway(ops)
	return applied, known
}
