package etcdstore

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
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
	key   string // bucket "/" key: the etcd key less the prefix (a job's: jobs/MSGID)
	val   []byte // see whole
	whole bool   // val is the value; else a job's head, a result's expiry, or nil (not kept)
	slot  uint64 // a job's slot (slots.go); 0: at its own key (format 4)
}

func lessItem(a, b *sitem) bool { return a.key < b.key }

type stree = btree.BTreeG[*sitem]

func newSTree() *stree { return btree.NewG(32, lessItem) }

// shadowItem is what the shadow keeps of bucket's key holding v: its
// part, when small enough (a whole value up to wholeMax, a head up to
// headMax), else nothing.
func shadowItem(rel string, bucket, key, v []byte) *sitem {
	it := &sitem{key: rel}
	switch part, whole := store.Part(bucket, key, v); {
	case whole && len(v) <= wholeMax:
		it.val, it.whole = append([]byte{}, v...), true
	case !whole && part != nil && len(part) <= headMax:
		it.val = bytes.Clone(part)
	}
	return it
}

// headOfValue is what Head gives of bucket's key holding v (whole): its
// part, or v when it has none.
func headOfValue(bucket, key, v []byte) []byte {
	if part, _ := store.Part(bucket, key, v); part != nil || v == nil {
		return part
	}
	return v
}

// indexItem is the entry of a derived index that job key's record v
// makes.
func indexItem(key, v []byte) (*sitem, error) {
	ib, ik, err := store.IndexEntry(key, v)
	if err != nil {
		return nil, err
	}
	return &sitem{key: string(ib) + "/" + string(ik), val: bytes.Clone(key), whole: true}, nil
}

// derived are the state indexes, kept in the shadow alone since format
// 4: each is derived from the job records (indexItem) when the shadow
// is loaded, and changed by the batches like any key, but never written
// to etcd. A job's life is then one key in etcd.
var derived = slices.DeleteFunc(slices.Clone(store.Buckets), func(b []byte) bool { return !isDerived(b) })

func isDerived(bucket []byte) bool { return store.IsIndex(bucket) }

// rel is the shadow's key of an etcd key.
func (e *Journal) rel(etcdKey string) string { return etcdKey[len(e.opts.Prefix):] }

// split returns the bucket and key of a shadow key.
func split(rel string) (bucket, key []byte) {
	b, k, _ := strings.Cut(rel, "/")
	return []byte(b), []byte(k)
}

// What loadShadow reads a request: about loadPage bytes, from
// minLoadKeys to maxLoadKeys keys, loadReads requests at once.
//
// etcd before 3.5 walks the whole of a range's index for each page of it
// (a limit does not stop the walk), so pages of a large range cost the
// square of its keys (200,000 jobs took 4 s, 5 times what this takes). The jobs and other
// buckets of large values are read instead as their keys first (one
// request, keys only), then the values of consecutive keys, each request
// a range that holds just them.
const (
	loadPage    = 4 << 20
	minLoadKeys = 64
	maxLoadKeys = 4096
	loadReads   = 4
	keysPage    = 1 << 18
)

// loadShadow reads every key under the prefix at one revision and makes
// the shadow of it. What it holds at once beyond the shadow is a bucket's
// keys and a few pages of values.
func (e *Journal) loadShadow() error {
	l, err := e.readShadow()
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.shadow, e.shadowRev, e.lastSlot = l.t, l.rev, l.lastSlot
	e.mu.Unlock()
	return nil
}

// readShadow reads every key under the prefix at one revision into a
// shadow.
func (e *Journal) readShadow() (*loader, error) {
	ctx, cancel := e.ctx()
	resp, err := e.cli.Get(ctx, e.key(store.BucketMeta, formatKey))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("journal on etcd %s: reading it: %w", e.opts.Prefix, err)
	}
	l := &loader{e: e, t: newSTree(), rev: resp.Header.Revision, slots: make(chan struct{}, loadReads)}
	var wg sync.WaitGroup
	for _, b := range append(slices.Clone(store.Buckets), slotBucket) {
		wg.Go(func() {
			if err := l.load(b); err != nil {
				l.fail(err)
			}
		})
	}
	wg.Wait()
	if l.err != nil {
		return nil, l.err
	}
	return l, nil
}

// loader reads the keys under the prefix into a shadow.
type loader struct {
	e     *Journal
	rev   int64
	slots chan struct{} // requests at once

	mu       sync.Mutex
	t        *stree
	lastSlot uint64 // the highest slot read
	err      error  // the first failure
}

// get is one read at the loader's revision.
func (l *loader) get(start, end string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	l.slots <- struct{}{}
	defer func() { <-l.slots }()
	ctx, cancel := l.e.ctx()
	defer cancel()
	resp, err := l.e.cli.Get(ctx, start, append(opts, clientv3.WithRange(end), clientv3.WithRev(l.rev))...)
	if err != nil {
		return nil, fmt.Errorf("journal on etcd %s: reading it: %w", l.e.opts.Prefix, err)
	}
	return resp, nil
}

// load reads a bucket: an index's small values a page at a time (few
// keys since format 4), another's by their keys.
func (l *loader) load(bucket []byte) error {
	start, end := l.e.key(bucket, nil), l.e.bucketEnd(bucket)
	if pageOf(bucket) == indexPage {
		for {
			resp, err := l.get(start, end, clientv3.WithLimit(indexPage))
			if err != nil {
				return err
			}
			if _, err := l.add(resp.Kvs); err != nil {
				return err
			}
			if !resp.More {
				return nil
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	var keys []*mvccpb.KeyValue
	for from := start; ; { // keys only, keysPage a request: each walks the range, but there are few
		resp, err := l.get(from, end, clientv3.WithKeysOnly(), clientv3.WithLimit(keysPage))
		if err != nil {
			return err
		}
		keys = append(keys, resp.Kvs...)
		if !resp.More {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	var (
		wg    sync.WaitGroup
		limit atomic.Int64 // keys a request: grows while pages are small
		first error
		fmu   sync.Mutex
		room  = make(chan struct{}, loadReads)
	)
	limit.Store(minLoadKeys)
	for len(keys) > 0 {
		fmu.Lock()
		err := first
		fmu.Unlock()
		if err != nil {
			break
		}
		n := min(int(limit.Load()), len(keys))
		from, to := string(keys[0].Key), string(keys[n-1].Key)+"\x00"
		want := n
		keys = keys[n:]
		room <- struct{}{} // a request's worth, cut when one can go
		wg.Go(func() {
			defer func() { <-room }()
			err := func() error {
				resp, err := l.get(from, to)
				if err != nil {
					return err
				}
				size, err := l.add(resp.Kvs)
				switch {
				case err != nil:
					return err
				case size < loadPage/2 && want < maxLoadKeys:
					limit.CompareAndSwap(int64(want), int64(want*2))
				case size > 2*loadPage && want > minLoadKeys:
					limit.CompareAndSwap(int64(want), int64(want/2))
				}
				return nil
			}()
			if err != nil {
				fmu.Lock()
				first = cmp.Or(first, err)
				fmu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// add puts a page of keys in the shadow, with the index entries their
// jobs' records derive; it returns the page's bytes.
func (l *loader) add(kvs []*mvccpb.KeyValue) (int, error) {
	items := make([]*sitem, 0, len(kvs))
	var jobs []*sitem // each job's item, then its index entry's
	size := 0
	var top uint64
	for _, kv := range kvs {
		size += len(kv.Value)
		job, idx, err := l.e.jobItems(kv)
		if err != nil {
			return 0, fmt.Errorf("journal on etcd %s: key %s: %w", l.e.opts.Prefix, kv.Key, err)
		}
		if job != nil {
			jobs = append(jobs, job, idx)
			top = max(top, job.slot)
			continue
		}
		rel := l.e.rel(string(kv.Key))
		bucket, key := split(rel)
		items = append(items, shadowItem(rel, bucket, key, kv.Value))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastSlot = max(l.lastSlot, top)
	for _, it := range items {
		l.t.ReplaceOrInsert(it)
	}
	for i := 0; i < len(jobs); i += 2 {
		job, idx := jobs[i], jobs[i+1]
		if old, had := l.t.ReplaceOrInsert(job); had {
			return 0, fmt.Errorf("journal on etcd %s: %w: %s is stored twice (slots %d and %d; 0 is its own key)", l.e.opts.Prefix, store.ErrCorrupt,
				job.key, old.slot, job.slot)
		}
		l.t.ReplaceOrInsert(idx)
	}
	return size, nil
}

// jobItems returns the shadow's items of a job's key (jobs/MSGID, or a
// slot): the job's and its index entry's; nil for another key.
func (e *Journal) jobItems(kv *mvccpb.KeyValue) (job, idx *sitem, err error) {
	bucket, key := split(e.rel(string(kv.Key)))
	var slot uint64
	v := kv.Value
	switch {
	case bytes.Equal(bucket, slotBucket):
		if slot, err = slotOf(key); err != nil {
			return nil, nil, err
		}
		if key, v, err = unwrapJob(v); err != nil {
			return nil, nil, err
		}
	case !bytes.Equal(bucket, store.BucketJobs):
		return nil, nil, nil
	}
	if idx, err = indexItem(key, v); err != nil {
		return nil, nil, err
	}
	job = shadowItem(jobRel(key), store.BucketJobs, key, v)
	job.slot = slot
	return job, idx, nil
}

// jobRel is the shadow's key of job msgid.
func jobRel(msgid []byte) string { return string(store.BucketJobs) + "/" + string(msgid) }

func (l *loader) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// applyShadow records committed operations in the shadow, at revision
// rev; slots are the slots of the jobs put (place).
func (e *Journal) applyShadow(ops []clientv3.Op, slots map[string]uint64, rev int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, op := range ops {
		k := string(op.KeyBytes())
		rel := e.rel(k)
		if op.IsDelete() {
			e.shadow.Delete(&sitem{key: rel})
			continue
		}
		bucket, key := split(rel)
		it := shadowItem(rel, bucket, key, op.ValueBytes())
		it.slot = slots[k]
		e.shadow.ReplaceOrInsert(it)
	}
	e.shadowRev = max(e.shadowRev, rev)
}

// lookup is what t's shadow knows of key (an etcd key): whether it is
// stored, and the item. A batch sees the changes of the batches still
// committing (pipelined) over the shadow.
func (t *etcdTx) lookup(key string) (*sitem, bool) {
	rel := t.e.rel(key)
	if !t.write {
		return t.shadow.Get(&sitem{key: rel})
	}
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	if c, ok := t.e.inflight[key]; ok {
		if c.del {
			return nil, false
		}
		return &sitem{key: rel, val: c.val, whole: true}, true
	}
	return t.shadow.Get(&sitem{key: rel})
}

// Head implements store.HeadReader: a job's head, a result's expiry, or
// another value whole, from what the batch changed or read, or from the
// shadow; etcd only for a job whose head the shadow does not keep.
func (t *etcdTx) Head(bucket, key []byte) []byte {
	k := t.e.key(bucket, key)
	if t.write {
		t.touched[k] = true
	}
	if v, ok := t.mine(k); ok {
		return headOfValue(bucket, key, v)
	}
	it, ok := t.lookup(k) // once: a Complete, and Load, read every job's head here
	switch {
	case !ok:
		return nil
	case it.whole:
		return headOfValue(bucket, key, it.val)
	case it.val != nil:
		return it.val
	}
	return headOfValue(bucket, key, t.Get(bucket, key))
}

// Peek implements store.Peeker for Load: a job's head from the shadow
// (etcd checks its own bytes: checked).
func (t *etcdTx) Peek(bucket, key []byte) ([]byte, bool) { return t.Head(bucket, key), true }
