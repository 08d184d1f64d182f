package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/store"
)

// A Warm keeps a journal's shadow current while this process stands by:
// read once, then changed by each event of a watch on the prefix (with
// each key's previous value, to drop the index entry a job's record
// derived). A takeover opens the journal from it (Options.Warm) instead
// of reading every key again, so a failover does not grow with the
// backlog. It costs the standby the leader's memory for the shadow.
//
// Open writes a mark (meta/taken) under the new leader's guard and takes
// the shadow once the watch has brought the mark: every write the leader
// before made came before it. A Warm that fails (its watch compacted
// away, an event it cannot apply) or is late leaves Open to read the
// journal itself.
type Warm struct {
	e      *Journal // for its keys and reads; not opened
	cancel context.CancelFunc
	done   chan struct{}
	loaded chan struct{} // closed once read
	keys   int           // read then

	mu       sync.Mutex
	t        *stree // nil until read, and once taken
	lastSlot uint64 // the highest slot seen
	rev      int64  // the last revision applied
	err      error
	changed  chan struct{} // closed at each change of rev or err
}

// StartWarm starts keeping the shadow of the journal opts name (its
// Prefix and Timeout).
func StartWarm(cli *clientv3.Client, opts Options) *Warm {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Warm{e: &Journal{cli: cli, opts: opts}, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		loaded: make(chan struct{})}
	go w.run(ctx)
	return w
}

// Loaded is closed once the copy is read (and followed since); Keys is
// how many keys it read.
func (w *Warm) Loaded() <-chan struct{} { return w.loaded }

// Done is closed once the copy stopped following (Stop, taken, failed).
func (w *Warm) Done() <-chan struct{} { return w.done }

// Keys is how many keys the copy held when read (after Loaded).
func (w *Warm) Keys() int { return w.keys }

// Stop stops the watch; a shadow not taken is dropped.
func (w *Warm) Stop() {
	w.cancel()
	<-w.done
	w.mu.Lock()
	w.t = nil
	w.mu.Unlock()
}

func (w *Warm) run(ctx context.Context) {
	defer close(w.done)
	l, err := w.e.readShadow()
	if err != nil {
		w.fail(err)
		return
	}
	rev := l.rev
	w.mu.Lock()
	w.t, w.rev, w.keys, w.lastSlot = l.t, rev, l.t.Len(), l.lastSlot
	w.note()
	w.mu.Unlock()
	close(w.loaded)
	wch := w.e.cli.Watch(clientv3.WithRequireLeader(ctx), w.e.opts.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			w.fail(fmt.Errorf("watching it: %w", err))
			return
		}
		if err := w.apply(resp.Events); err != nil {
			w.fail(err)
			return
		}
	}
	w.fail(errors.New("its watch ended"))
}

// note wakes whoever waits on a change (under mu).
func (w *Warm) note() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *Warm) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("journal on etcd %s: the standby's copy: %w", w.e.opts.Prefix, err)
		w.t = nil
		w.note()
	}
}

// apply changes the shadow by a watch's events.
func (w *Warm) apply(evs []*clientv3.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t == nil {
		return nil // taken
	}
	for _, ev := range evs {
		rel := w.e.rel(string(ev.Kv.Key))
		bucket, key := split(rel)
		switch {
		case bytes.Equal(bucket, store.BucketJobs) || bytes.Equal(bucket, slotBucket):
			if err := w.applyJob(ev, bucket, key); err != nil {
				return fmt.Errorf("key %s: %w", ev.Kv.Key, err)
			}
		case ev.Type == mvccpb.DELETE:
			w.t.Delete(&sitem{key: rel})
		default:
			w.t.ReplaceOrInsert(shadowItem(rel, bucket, key, ev.Kv.Value))
		}
		w.rev = max(w.rev, ev.Kv.ModRevision)
	}
	w.note()
	return nil
}

// applyJob changes the shadow by an event of a job's key (jobs/MSGID or
// a slot, slots.go): the job there before ends (its item and the index
// entry its record derived), and the one put starts.
func (w *Warm) applyJob(ev *clientv3.Event, bucket, key []byte) error {
	id, prev := key, []byte(nil) // the job there before, and its record
	switch {
	case bytes.Equal(bucket, slotBucket) && ev.PrevKv != nil:
		var err error
		if id, prev, err = unwrapJob(ev.PrevKv.Value); err != nil {
			return err
		}
	case bytes.Equal(bucket, slotBucket):
		if ev.Type == mvccpb.DELETE || !ev.IsCreate() {
			return errors.New("the job it held before is not known")
		}
	case ev.PrevKv != nil:
		prev = ev.PrevKv.Value
	default:
		if it, ok := w.t.Get(&sitem{key: jobRel(key)}); ok {
			if it.val == nil {
				return fmt.Errorf("the previous record of job %q is not known", key)
			}
			prev = it.val // its head: enough for its index entry
		}
	}
	if prev != nil {
		if idx, err := indexItem(id, prev); err == nil {
			w.t.Delete(idx)
		}
		w.t.Delete(&sitem{key: jobRel(id)})
	}
	if ev.Type == mvccpb.DELETE {
		return nil
	}
	job, idx, err := w.e.jobItems(ev.Kv)
	if err != nil {
		return err
	}
	w.t.ReplaceOrInsert(job)
	w.t.ReplaceOrInsert(idx)
	w.lastSlot = max(w.lastSlot, job.slot)
	return nil
}

// take waits until the shadow holds revision at, at most wait, then
// stops the watch and hands the shadow over.
func (w *Warm) take(at int64, wait time.Duration) (*stree, uint64, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		w.mu.Lock()
		t, rev, err, changed, last := w.t, w.rev, w.err, w.changed, w.lastSlot
		if err == nil && t != nil && rev >= at {
			w.t = nil
			w.mu.Unlock()
			w.cancel()
			<-w.done
			return t, last, nil
		}
		w.mu.Unlock()
		if err != nil {
			return nil, 0, err
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, 0, fmt.Errorf("journal on etcd %s: the standby's copy is not at revision %d after %v", w.e.opts.Prefix, at, wait)
		}
	}
}

// takenKey is where a leader marks its takeover: the time it took the
// journal (unix ns).
var takenKey = []byte("taken")

// fromWarm opens e's shadow from its Warm: it marks the takeover under
// the guard and takes the shadow once the mark is in it. An error says
// why the journal must be read instead.
func (e *Journal) fromWarm() error {
	mark := e.key(store.BucketMeta, takenKey)
	ctx, cancel := e.ctx()
	resp, err := e.cli.Txn(ctx).If(e.opts.Guard...).Then(clientv3.OpPut(mark, strconv.FormatInt(time.Now().UnixNano(), 10))).Commit()
	cancel()
	switch {
	case err != nil:
		return err
	case !resp.Succeeded:
		return fmt.Errorf("%w: its leadership in etcd is gone", store.ErrFenced)
	}
	t, last, err := e.opts.Warm.take(resp.Header.Revision, max(30*time.Second, 10*e.opts.Timeout))
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.shadow, e.shadowRev, e.lastSlot = t, resp.Header.Revision, last
	e.mu.Unlock()
	return nil
}
