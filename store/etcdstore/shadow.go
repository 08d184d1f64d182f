package etcdstore

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/google/btree"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/store"
)

// The shadow is every key the journal holds in etcd, as the journal
// knows it: read once when the journal opens, then changed by each of
// its own commits. Only the group's leader writes under the prefix (every
// write is guarded by its leadership), so the shadow says what etcd
// holds without asking it: a key the shadow lacks is not in etcd, and a
// batch's reads of keys that are not there (an Append's duplicate check)
// or that it keeps (a job's head for a Complete) make no request.
//
// It keeps, for each key, the value itself when it is small
// (wholeMax), a job's head (store.Head: its record without payload and
// trail), a kept result's expiry, or nothing: a large value is read from
// etcd when a write needs it whole. Its memory grows with the number of
// stored jobs (a head is about a hundred bytes with its key), not with
// their payloads.
//
// Views read a clone of it (google/btree clones lazily) with etcd at its
// revision: the same moment. Compaction never passes that revision.

// wholeMax is the largest value the shadow keeps whole; a job's head
// over headMax is not kept (the record is read when needed).
const (
	wholeMax = 1 << 10
	headMax  = 4 << 10
)

// sitem is one key of the shadow.
type sitem struct {
	key   string // bucket "/" key: the etcd key less the prefix
	val   []byte // see whole
	whole bool   // val is the value; else a job's head, a result's expiry, or nil (not kept)
}

func lessItem(a, b *sitem) bool { return a.key < b.key }

type stree = btree.BTreeG[*sitem]

func newSTree() *stree { return btree.NewG(32, lessItem) }

// shadowItem is what the shadow keeps of bucket's key holding v.
func shadowItem(rel string, bucket, key, v []byte) *sitem {
	it := &sitem{key: rel}
	switch {
	case bytes.Equal(bucket, store.BucketJobs):
		if h, err := store.Head(key, v); err == nil && len(h) <= headMax {
			it.val = bytes.Clone(h)
		}
	case bytes.Equal(bucket, store.BucketResults) && len(v) > 8:
		it.val = bytes.Clone(v[:8])
	case len(v) <= wholeMax:
		it.val, it.whole = bytes.Clone(v), true
		if it.val == nil {
			it.val = []byte{}
		}
	}
	return it
}

// headOfValue is what Head gives of bucket's key holding v (whole).
func headOfValue(bucket, key, v []byte) []byte {
	switch {
	case v == nil:
		return nil
	case bytes.Equal(bucket, store.BucketJobs):
		if h, err := store.Head(key, v); err == nil {
			return h
		}
	case bytes.Equal(bucket, store.BucketResults) && len(v) > 8:
		return v[:8]
	}
	return v
}

// derived are the state indexes, kept in the shadow alone since format
// 4: each is derived from the job records (store.IndexEntry) when the
// shadow is loaded, and changed by the batches like any key, but never
// written to etcd. A job's life is then one key in etcd.
var derived = [][]byte{store.BucketPending, store.BucketDead, store.BucketDone, store.BucketCancelled, store.BucketWaiting}

func isDerived(bucket []byte) bool { return store.IsIndex(bucket) }

// rel is the shadow's key of an etcd key.
func (e *Journal) rel(etcdKey string) string { return etcdKey[len(e.opts.Prefix):] }

// split returns the bucket and key of a shadow key.
func split(rel string) (bucket, key []byte) {
	b, k, _ := strings.Cut(rel, "/")
	return []byte(b), []byte(k)
}

// loadShadow reads every key under the prefix at one revision, a page at a
// time (what it holds at once is a page and the shadow), and makes the
// shadow of it.
func (e *Journal) loadShadow() error {
	t := newSTree()
	var rev int64
	for _, b := range store.Buckets {
		start, end := e.key(b, nil), e.bucketEnd(b)
		for {
			ctx, cancel := e.ctx()
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageOf(b))}
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			resp, err := e.cli.Get(ctx, start, opts...)
			cancel()
			if err != nil {
				return fmt.Errorf("journal on etcd %s: reading it: %w", e.opts.Prefix, err)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			for _, kv := range resp.Kvs {
				rel := e.rel(string(kv.Key))
				bucket, key := split(rel)
				t.ReplaceOrInsert(shadowItem(rel, bucket, key, kv.Value))
				if bytes.Equal(bucket, store.BucketJobs) {
					ib, ik, err := store.IndexEntry(key, kv.Value)
					if err != nil {
						return fmt.Errorf("journal on etcd %s: key %s: %w", e.opts.Prefix, kv.Key, err)
					}
					t.ReplaceOrInsert(&sitem{key: string(ib) + "/" + string(ik), val: bytes.Clone(key), whole: true})
				}
			}
			if !resp.More {
				break
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	e.mu.Lock()
	e.shadow, e.shadowRev = t, rev
	e.mu.Unlock()
	return nil
}

// applyShadow records committed operations in the shadow, at revision rev.
func (e *Journal) applyShadow(ops []clientv3.Op, rev int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, op := range ops {
		rel := e.rel(string(op.KeyBytes()))
		if op.IsDelete() {
			e.shadow.Delete(&sitem{key: rel})
			continue
		}
		bucket, key := split(rel)
		e.shadow.ReplaceOrInsert(shadowItem(rel, bucket, key, op.ValueBytes()))
	}
	e.shadowRev = max(e.shadowRev, rev)
}

// lookup is what t's shadow knows of key (an etcd key): whether it is
// stored, and the item.
func (t *etcdTx) lookup(key string) (*sitem, bool) {
	return t.shadow.Get(&sitem{key: t.e.rel(key)})
}

// Head implements store.HeadReader: a job's head, a result's expiry, or
// another value whole, from what the batch changed or read, or from the
// shadow; etcd only for a job whose head the shadow does not keep.
func (t *etcdTx) Head(bucket, key []byte) []byte {
	k := t.e.key(bucket, key)
	if t.write {
		t.touched[k] = true
	}
	if v, ok := t.known(k); ok {
		return headOfValue(bucket, key, v)
	}
	it, ok := t.lookup(k)
	switch {
	case !ok:
		return nil
	case it.whole || it.val != nil:
		return it.val
	}
	return headOfValue(bucket, key, t.Get(bucket, key))
}

// Peek implements store.Peeker for Load: a job's head from the shadow
// (etcd checks its own bytes: checked).
func (t *etcdTx) Peek(bucket, key []byte) ([]byte, bool) { return t.Head(bucket, key), true }
