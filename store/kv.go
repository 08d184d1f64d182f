package store

// The journal's logic (writes.go, reads.go, schedules.go, queues.go) is
// written once, against buckets of sorted keys in transactions (layout.go
// names them). Each backend gives it those through KV and Tx: boltstore as
// bbolt buckets in one file, etcdstore as keys under a prefix, a bucket's
// name and a slash before each key. Core (core.go) runs the logic over a
// backend; a backend embeds it. Only backends use this file's types.

// Tx is one transaction of a backend, for reading or for writing.
type Tx interface {
	// Get returns the value of key in bucket, nil when there is none. The
	// value is valid until the transaction ends.
	Get(bucket, key []byte) []byte
	// Gets returns the values of several keys of one bucket, in order.
	Gets(bucket []byte, keys [][]byte) [][]byte
	Put(bucket, key, val []byte) error
	Delete(bucket, key []byte) error
	// Scan calls fn with the bucket's keys from from on (nil: the first),
	// in order, until fn returns false or an error.
	Scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error
	// NextSeq returns a sequence number greater than any given before.
	NextSeq() (uint64, error)
	// Release tells the backend a value read will not be read again
	// (boltstore gives its pages back to the kernel).
	Release(v []byte)
	// Err is the first failure of a read that had no error to return
	// (Get, Gets); the transaction fails with it.
	Err() error
	// Damaged lists the values the transaction found failing their
	// checksums (a backend that checks its bytes): Get, Gets and Scan
	// gave each as missing. The core moves them aside (quarantine.go).
	Damaged() []Damage
	// Raw returns key's stored value without checking it (nil if none),
	// for moving a damaged one aside.
	Raw(bucket, key []byte) []byte
}

// A Peeker is a Tx that can give a large value unchecked (checked
// false), for a reader of its first and last bytes only: Load reads a
// job's fields, not its payload. Such a value is checked whole before
// anything more of it is trusted (Get), as when its payload is read.
type Peeker interface {
	Peek(bucket, key []byte) (v []byte, checked bool)
}

// KV is a backend's storage.
type KV interface {
	// Update runs fn in one write transaction and makes it durable. A
	// backend that must split a batch (etcd) is told by mark where each
	// write ends; mark refuses (and takes back) a write too large for one
	// commit. It may fail with a *PartialError after committing some.
	// Without durable the batch gates no acknowledgement (Completes
	// only): a backend with a log may write it and leave the flush to the
	// next durable batch.
	Update(fn func(t Tx, mark func() error) error, durable bool) error
	View(fn func(t Tx) error) error
}

// A Pipeliner is a KV whose commits may overlap (etcd: each is a round
// trip to a quorum). Submit applies fn as Update does, at once, and
// commits in the background; wait gives Update's outcome once the commit
// is done. A batch applied after another reads its changes, and when it
// depends on them (reads or writes a key the other changed) it is
// committed only after the other, and fails if the other failed.
type Pipeliner interface {
	Submit(fn func(t Tx, mark func() error) error, durable bool) (wait func() error)
}

// Prefetcher is a Tx that reads ahead the keys a batch's writes will
// read, in a few requests instead of one each (etcd).
type Prefetcher interface{ Prefetch(keys []Key) }

// PartialError is an Update's failure after some of its writes were
// committed: OK[i] says write i is durable; the others failed with Err.
type PartialError struct {
	OK  []bool
	Err error
}

func (p *PartialError) Error() string { return p.Err.Error() }
func (p *PartialError) Unwrap() error { return p.Err }

// Key names a key of a bucket: a write's reads, fetched before its batch
// runs. Whole says the write reads the whole value (Get), not only its
// head (HeadReader): a job it writes back, a result it keeps.
type Key struct {
	Bucket, Key []byte
	Whole       bool
}
