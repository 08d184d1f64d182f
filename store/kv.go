package store

// The journal's logic (writes.go, reads.go, schedules.go, queues.go) is
// written once, against buckets of sorted keys in transactions. Each
// backend gives it those: Bolt as bbolt buckets in one file, Etcd as
// keys under a prefix, a bucket's name and a slash before each key.

// kvTx is one transaction of a backend, for reading or for writing.
type kvTx interface {
	// get returns the value of key in bucket, nil when there is none. The
	// value is valid until the transaction ends.
	get(bucket, key []byte) []byte
	// gets returns the values of several keys of one bucket, in order.
	gets(bucket []byte, keys [][]byte) [][]byte
	put(bucket, key, val []byte) error
	del(bucket, key []byte) error
	// scan calls fn with the bucket's keys from from on (nil: the first),
	// in order, until fn returns false or an error.
	scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error
	// nextSeq returns a sequence number greater than any given before.
	nextSeq() (uint64, error)
	// release tells the backend a value read will not be read again
	// (Bolt gives its pages back to the kernel).
	release(v []byte)
	// err is the first failure of a read that had no error to return
	// (get, gets); the transaction fails with it.
	err() error
}

// kvStore is a backend's storage.
type kvStore interface {
	// update runs fn in one write transaction and makes it durable. A
	// backend that must split a batch (Etcd) is told by mark where each
	// write ends; mark refuses (and takes back) a write too large for one
	// commit. It may fail with a partial error after committing some.
	update(fn func(t kvTx, mark func() error) error) error
	view(fn func(t kvTx) error) error
}

// partial is an update's failure after some of its writes were
// committed: ok[i] says write i is durable; the others failed with err.
type partial struct {
	ok  []bool
	err error
}

func (p partial) Error() string { return p.err.Error() }
func (p partial) Unwrap() error { return p.err }

// bkey names a key of a bucket: a write's reads, fetched before its batch
// runs (Etcd reads them all in a few requests instead of one each).
type bkey struct{ bucket, key []byte }
