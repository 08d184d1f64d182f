package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
)

// Every value in the bbolt file is sealed (store.Seal): a read checks
// it, and one that fails is given as missing and listed in the
// transaction's Damaged (store/quarantine.go moves it aside). The
// memtable's values need none: they came from the log, whose records
// are checked.

func sealed(bucket, key, val []byte) []byte { return store.Seal(bucket, key, val) }

func unseal(bucket, key, stored []byte) ([]byte, bool) { return store.Unseal(bucket, key, stored) }

// reader is what a batch and a view share: the memtable's layers, newest
// first, over a bbolt read transaction.
type reader struct {
	j       *Journal
	layers  []*tree
	btx     *bolt.Tx
	damaged []store.Damage
	first   error
	bkts    [16]*bolt.Bucket // by bucket id: a lookup of tx.Bucket is a search of its own
	probe   item             // lookup's; a reader is one goroutine's, as bbolt's Tx is
}

func (r *reader) Err() error              { return r.first }
func (r *reader) Damaged() []store.Damage { return r.damaged }

func (r *reader) id(bucket []byte) uint8 {
	id, err := bucketID(bucket)
	if err != nil && r.first == nil {
		r.first = err
	}
	return id
}

func (r *reader) bolt(b []byte) *bolt.Bucket {
	id, err := bucketID(b)
	if err != nil || int(id) >= len(r.bkts) {
		return r.btx.Bucket(b)
	}
	if r.bkts[id] == nil {
		r.bkts[id] = r.btx.Bucket(b)
	}
	return r.bkts[id]
}

// Get implements store.Tx.
func (r *reader) Get(bucket, key []byte) []byte {
	v, _ := r.get(bucket, key, false)
	return v
}

// Peek implements store.Peeker: a value of bbolt's of peekSize bytes or
// more comes unchecked, as the file holds it; checking it would read
// every page of it, from the disk on a cold start.
func (r *reader) Peek(bucket, key []byte) ([]byte, bool) { return r.get(bucket, key, true) }

// peekSize is where Peek stops checking: a job of 64 KiB or more is read
// whole (and checked) only when it is dispatched or inspected.
const peekSize = 64 << 10

// get is key's value: the memtable's (checked as the log's record when
// read), or bbolt's, checked unless lazy and of peekSize or more.
func (r *reader) get(bucket, key []byte, lazy bool) (_ []byte, checked bool) {
	if it, ok := lookup(r.layers, &r.probe, r.id(bucket), key); ok {
		switch {
		case it.del:
			return nil, true
		case it.logged() && lazy && it.ref.head != nil:
			return it.ref.head, true // Load reads a job's fields only
		case it.logged():
			return r.logged(bucket, it), true
		}
		return it.val, true
	}
	bkt := r.bolt(bucket)
	if bkt == nil {
		return nil, true
	}
	v := bkt.Get(key)
	switch {
	case v == nil:
		return nil, true
	case lazy && len(v) >= peekSize:
		return v[:len(v)-4], false
	}
	return r.check(bucket, key, v), true
}

// Head implements store.HeadReader: a logged job's head, or a kept
// result's expiry, from memory; any other value whole.
func (r *reader) Head(bucket, key []byte) []byte {
	if it, ok := lookup(r.layers, &r.probe, r.id(bucket), key); ok && it.logged() && it.ref.head != nil {
		return it.ref.head
	}
	return r.Get(bucket, key)
}

// logged reads a memtable's logged value from the log: nil, noted as
// damaged, when it fails its checksum.
func (r *reader) logged(bucket []byte, it *item) []byte {
	v, ok, err := r.j.readLogged(it)
	switch {
	case err != nil:
		if r.first == nil {
			r.first = err
		}
		return nil
	case !ok:
		r.damaged = append(r.damaged, store.Damage{Bucket: bytes.Clone(bucket), Key: bytes.Clone(it.key),
			Reason: fmt.Sprintf("its checksum in the log %s (segment %d, offset %d) fails", LogDir(r.j.path), it.ref.at.Segment, it.ref.at.Offset)})
		return nil
	}
	return v
}

// check returns bbolt's value v of key without its checksum, or nil,
// noted as damaged, when the checksum fails.
func (r *reader) check(bucket, key, v []byte) []byte {
	if !store.Sealed(bucket, key) {
		return v // the schema version, migrations' own (a backup's scan of meta reads it)
	}
	val, ok := unseal(bucket, key, v)
	// Checking it read every page of it: a large one's go back to the
	// kernel at once (what the caller reads of it comes back from the
	// page cache), or a Complete of a large job would keep it resident.
	dropPages(v)
	if !ok {
		r.damaged = append(r.damaged, store.Damage{Bucket: bytes.Clone(bucket), Key: bytes.Clone(key),
			Reason: fmt.Sprintf("its checksum in %s fails", r.j.path)})
		return nil
	}
	return val
}

// Gets implements store.Tx.
func (r *reader) Gets(bucket []byte, keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = r.Get(bucket, k)
	}
	return out
}

// Raw implements store.Tx.
func (r *reader) Raw(bucket, key []byte) []byte {
	if it, ok := lookup(r.layers, &r.probe, r.id(bucket), key); ok {
		if it.logged() {
			v, _, _ := r.j.readLogged(it)
			return v
		}
		return it.val
	}
	bkt := r.bolt(bucket)
	if bkt == nil {
		return nil
	}
	v := bkt.Get(key)
	if len(v) >= 4 {
		return bytes.Clone(v[:len(v)-4])
	}
	return bytes.Clone(v)
}

// Scan implements store.Tx: the memtable's layers and bbolt merged in
// key order, the newest layer that has a key deciding it.
func (r *reader) Scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	id := r.id(bucket)
	curs := make([]*cursor, len(r.layers))
	for i, t := range r.layers {
		curs[i] = newCursor(t, id, from)
	}
	var bc *bolt.Cursor
	var bk, bv []byte
	if bkt := r.bolt(bucket); bkt != nil {
		bc = bkt.Cursor()
		if from != nil {
			bk, bv = bc.Seek(from)
		} else {
			bk, bv = bc.First()
		}
	}
	for {
		// The smallest key of any source, and the newest layer holding it.
		var key []byte
		win := -1
		for i, c := range curs {
			if h := c.head(); h != nil && (key == nil || bytes.Compare(h.key, key) < 0) {
				key, win = h.key, i
			}
		}
		fromBolt := bk != nil && (key == nil || bytes.Compare(bk, key) < 0)
		if fromBolt {
			key, win = bk, -1
		}
		if key == nil {
			return nil
		}
		var val []byte
		live := true
		if win >= 0 {
			it := curs[win].head()
			val, live = it.val, !it.del
			if live && it.logged() {
				val = r.logged(bucket, it)
				live = val != nil
			}
		} else {
			val = r.check(bucket, bk, bv)
			live = val != nil
		}
		k := key
		// Every source at this key moves on: the newer ones shadow the
		// older.
		for _, c := range curs {
			if h := c.head(); h != nil && bytes.Equal(h.key, k) {
				c.next()
			}
		}
		if bk != nil && bytes.Equal(bk, k) {
			bk, bv = bc.Next()
		}
		if !live {
			continue
		}
		if more, err := fn(k, val); !more || err != nil {
			return err
		}
	}
}

// Release implements store.Tx: a value of bbolt's mapping gives its
// pages back (pages_linux.go); a memtable's is left alone.
func (r *reader) Release(v []byte) {
	if len(v) == 0 || r.btx == nil {
		return
	}
	info := r.btx.DB().Info()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	if p >= info.Data && p+uintptr(len(v)) <= info.Data+uintptr(r.btx.Size()) {
		dropPages(v)
	}
}

// batchTx is a batch being applied by the committer: its changes gather
// in over, the newest layer, and reach the memtable once the log has
// them (logKV.Update).
type batchTx struct {
	reader
	over *tree
	seq  uint64 // the job sequence, as the batch moves it
	seqd bool   // NextSeq was called
}

// Put implements store.Tx.
func (t *batchTx) Put(bucket, key, val []byte) error {
	t.over.ReplaceOrInsert(&item{bucket: t.id(bucket), key: bytes.Clone(key), val: bytes.Clone(val)})
	return t.first
}

// Delete implements store.Tx.
func (t *batchTx) Delete(bucket, key []byte) error {
	t.over.ReplaceOrInsert(&item{bucket: t.id(bucket), key: bytes.Clone(key), del: true})
	return t.first
}

// seqKey is where the job sequence lives in the meta bucket.
var seqKey = store.SeqKey

// NextSeq implements store.Tx: from memory, kept in meta/seq with the
// batch.
func (t *batchTx) NextSeq() (uint64, error) {
	t.seq++
	t.seqd = true
	return t.seq, t.Put(store.BucketMeta, seqKey, binary.BigEndian.AppendUint64(nil, t.seq))
}

// viewTx is a read: a clone of the memtable over a bbolt read
// transaction. Its writes fail.
type viewTx struct{ reader }

func (viewTx) Put([]byte, []byte, []byte) error { return errViewWrite }
func (viewTx) Delete([]byte, []byte) error      { return errViewWrite }
func (viewTx) NextSeq() (uint64, error)         { return 0, errViewWrite }

var errViewWrite = fmt.Errorf("boltstore: a write in a view")
