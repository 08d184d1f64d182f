package boltstore

import (
	"bytes"
	"fmt"

	"github.com/google/btree"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/wal"
)

// The memtable: what the log holds and bbolt does not yet, in key order.
// It is kept in two trees. active takes the committer's changes; when a
// checkpoint starts, active becomes frozen (never changed again) and a
// new active begins; the checkpoint writes frozen into bbolt, then drops
// it. A read looks in active, then frozen, then bbolt: the first that
// has the key decides, and a tombstone says it is gone. Readers take a
// clone of active (google/btree clones lazily, copying a node only when
// the committer next changes it), so a view sees one moment however long
// it reads and whatever the committer does meanwhile.

// buckets are the journal's buckets by their number in the log.
var buckets = [][]byte{store.BucketMeta, store.BucketJobs, store.BucketPending, store.BucketDead,
	store.BucketResults, store.BucketResultExp, store.BucketSchedules, store.BucketQueues, store.BucketDone, store.BucketDamaged,
	store.BucketCancelled, store.BucketUnique, store.BucketUniqueExp,
	store.BucketWaiting, store.BucketAfter, store.BucketBatches, store.BucketAfterB, store.BucketSettling,
	store.BucketTenants, store.BucketLimiters}

// bucketID is a bucket's number in the log.
func bucketID(name []byte) (uint8, error) {
	for i, b := range buckets {
		if bytes.Equal(b, name) {
			return uint8(i), nil
		}
	}
	return 0, fmt.Errorf("boltstore: no bucket %q in the layout", name)
}

// item is one key's latest change. A value of logMin bytes or more is
// not kept: the item holds where it lies in the log (ref), and reads
// take it from there (Journal.readLogged), so the memtable's memory does
// not grow with payloads.
type item struct {
	bucket uint8
	key    []byte
	val    []byte  // nil in a tombstone, and when the value is in the log
	ref    *logRef // a large value's place in the log; see logged
	del    bool    // a tombstone: the key is gone, and may still be in bbolt
	// fresh: when it was written, nothing lay below it (frozen, bbolt):
	// deleting it leaves nothing to delete, so it is dropped, not
	// tombstoned. A job completed before its checkpoint never reaches
	// bbolt.
	fresh bool
	below bool // in a batch being applied: the key lies in frozen or bbolt (markBelow)
}

// logRef is where a large value lies in the log, and what a write
// decides on of it (head: a job's head, a result's expiry), when small.
type logRef struct {
	at     wal.Position // where it starts; Segment 0: not written yet
	n, sum uint32       // its length and CRC-32C
	head   []byte       // its part (store.Part), or nil: read it whole
}

// size is what an item costs in memory, roughly.
func (it *item) size() int64 {
	n := int64(len(it.key)+len(it.val)) + 64
	if it.ref != nil {
		n += int64(len(it.ref.head)) + 48
	}
	return n
}

// logged reports whether the item's value lies in the log, not in val.
func (it *item) logged() bool { return it.ref != nil && it.ref.at.Segment != 0 }

// logMin is the size from which a value is read from the log rather
// than kept in memory (etcdstore keeps whole values up to the same).
const logMin = 1 << 10

// headMax bounds a logged value's head kept in memory; a larger one is
// read whole when asked for.
const headMax = 4 << 10

func less(a, b *item) bool {
	if a.bucket != b.bucket {
		return a.bucket < b.bucket
	}
	return bytes.Compare(a.key, b.key) < 0
}

type tree = btree.BTreeG[*item]

func newTree() *tree { return btree.NewG(32, less) }

// lookup finds key in the first layer that has it. probe is the caller's
// to reuse: made here it would be allocated at each lookup (the btree's
// comparison escapes it), several a job.
func lookup(layers []*tree, probe *item, bucket uint8, key []byte) (*item, bool) {
	probe.bucket, probe.key = bucket, key
	for _, t := range layers {
		if t == nil {
			continue
		}
		if it, ok := t.Get(probe); ok {
			return it, true
		}
	}
	return nil, false
}

// cursor walks one layer's items of a bucket in key order, a chunk at a
// time (google/btree iterates by callback only).
type cursor struct {
	t      *tree
	bucket uint8
	chunk  []*item
	i      int
	from   []byte // where the next chunk starts
	end    bool   // the last chunk was the layer's last
}

func newCursor(t *tree, bucket uint8, from []byte) *cursor {
	c := &cursor{t: t, bucket: bucket, from: bytes.Clone(from), end: t == nil}
	c.fill()
	return c
}

const chunkLen = 64

func (c *cursor) fill() {
	c.chunk, c.i = c.chunk[:0], 0
	if c.end {
		return
	}
	c.t.AscendGreaterOrEqual(&item{bucket: c.bucket, key: c.from}, func(it *item) bool {
		if it.bucket != c.bucket {
			return false
		}
		c.chunk = append(c.chunk, it)
		return len(c.chunk) < chunkLen
	})
	if len(c.chunk) < chunkLen {
		c.end = true
	} else {
		c.from = append(bytes.Clone(c.chunk[len(c.chunk)-1].key), 0) // just after the last
	}
}

// head is the item the cursor is at, nil at the end.
func (c *cursor) head() *item {
	if c.i >= len(c.chunk) {
		c.fill()
		if c.i >= len(c.chunk) {
			return nil
		}
	}
	return c.chunk[c.i]
}

func (c *cursor) next() { c.i++ }
