package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
)

// A commit is one log record: the batch's changes, each key's last,
// in key order:
//
//	version 1 (1 byte), then per change: op (1 put, 2 delete) | bucket
//	number (1) | key length (uvarint) | key | for a put: value length
//	(uvarint) | value
//
// The record's CRC (package wal) covers it all.

const (
	batchVersion = 1
	opPut        = 1
	opDelete     = 2
)

func encodeBatch(over *tree) []byte {
	n := 1
	over.Ascend(func(it *item) bool {
		n += 2 + 2*binary.MaxVarintLen32 + len(it.key) + len(it.val)
		return true
	})
	b := make([]byte, 0, n)
	b = append(b, batchVersion)
	over.Ascend(func(it *item) bool {
		op := byte(opPut)
		if it.del {
			op = opDelete
		}
		b = append(b, op, it.bucket)
		b = binary.AppendUvarint(b, uint64(len(it.key)))
		b = append(b, it.key...)
		if !it.del {
			b = binary.AppendUvarint(b, uint64(len(it.val)))
			b = append(b, it.val...)
		}
		return true
	})
	return b
}

// decodeBatch reads a record's changes into a tree.
func decodeBatch(rec []byte) (*tree, error) {
	if len(rec) == 0 || rec[0] != batchVersion {
		return nil, fmt.Errorf("a log record of an unknown version")
	}
	over := newTree()
	b := rec[1:]
	for len(b) > 0 {
		if len(b) < 2 || b[0] != opPut && b[0] != opDelete || int(b[1]) >= len(buckets) {
			return nil, fmt.Errorf("a log record with a change it does not know")
		}
		it := &item{bucket: b[1], del: b[0] == opDelete}
		b = b[2:]
		var ok bool
		if it.key, b, ok = lenBytes(b); !ok {
			return nil, fmt.Errorf("a log record cut short")
		}
		if !it.del {
			if it.val, b, ok = lenBytes(b); !ok {
				return nil, fmt.Errorf("a log record cut short")
			}
		}
		over.ReplaceOrInsert(it)
	}
	return over, nil
}

// lenBytes reads a uvarint length and that many bytes, copied.
func lenBytes(b []byte) ([]byte, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return append([]byte(nil), b[k:k+int(n)]...), b[k+int(n):], true
}

// markBelow notes, in each item of a batch, whether its key lies below
// active: in frozen, or in btx, the ones the batch read with, which show
// one moment. It reads bbolt, so it runs guarded, before the batch is
// committed; apply then touches nothing that can fail.
func markBelow(over, frozen *tree, btx *bolt.Tx) {
	var bkts [16]*bolt.Bucket
	over.Ascend(func(it *item) bool {
		if frozen != nil && frozen.Has(it) {
			it.below = true
			return true
		}
		bkt := bkts[it.bucket%16]
		if bkt == nil {
			bkt = btx.Bucket(buckets[it.bucket])
			bkts[it.bucket%16] = bkt
		}
		it.below = bkt != nil && bkt.Get(it.key) != nil
		return true
	})
}

// apply puts a committed batch, marked (markBelow), into active (under
// j.mu).
func (j *Journal) apply(over *tree) {
	below := func(it *item) bool { return it.below }
	over.Ascend(func(x *item) bool {
		old, had := j.active.ReplaceOrInsert(x) // one search; taken out again below where nothing is left
		if had {
			j.memBytes -= old.size()
		}
		switch {
		case x.del && had && old.fresh: // made here, never checkpointed: nothing to delete
			j.active.Delete(x)
			return true
		case x.del && !had && !below(x): // nothing anywhere to delete
			j.active.Delete(x)
			return true
		case x.del:
			x.fresh = false
		case had:
			x.fresh = old.fresh
		default:
			x.fresh = !below(x)
		}
		j.memBytes += x.size()
		return true
	})
	j.snap = nil
}

// logKV is the Journal's storage: the log in front, the memtable, bbolt.
type logKV struct{ j *Journal }

// Update implements store.KV. The batch runs on the memtable over bbolt;
// its changes become one log record, written (and, if durable, flushed:
// the one fdatasync of a commit), then applied to the memtable. A batch
// too large for the log goes to bbolt directly (direct).
func (k logKV) Update(fn func(t store.Tx, mark func() error) error, durable bool) error {
	j := k.j
	if err := j.log.Failed(); err != nil {
		return err
	}
	if durable {
		if err := j.overLimit(); err != nil {
			return err
		}
	}
	j.dbmu.RLock()
	defer j.dbmu.RUnlock()
	btx, err := j.db.Begin(false)
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	defer btx.Rollback()
	j.mu.Lock()
	t := &batchTx{reader: reader{j: j, btx: btx}, over: newTree(), seq: j.seq}
	frozen := j.frozen
	t.layers = []*tree{t.over, j.active, frozen}
	err = j.guard(func() error {
		if err := fn(t, func() error { return nil }); err != nil {
			return err
		}
		markBelow(t.over, frozen, btx)
		return nil
	})
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if t.over.Len() == 0 {
		return nil // nothing changed (a duplicate, a job not found)
	}
	rec := encodeBatch(t.over)
	if int64(len(rec)) > j.opts.DirectBytes || int64(len(rec)) > j.log.MaxRecord() {
		return j.direct(t, btx)
	}
	last, err := j.log.Append([][]byte{rec}, durable)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.apply(t.over)
	j.seq, j.applied = t.seq, last
	due := j.memBytes >= j.opts.CheckpointBytes && j.frozen == nil
	j.mu.Unlock()
	if due {
		j.freeze()
		j.wakeCheckpointer()
	}
	return nil
}

// overLimit is the refusal of a write that must be durable while the
// memtable (what the log holds and bbolt not yet) is over MaxLogBytes.
func (j *Journal) overLimit() error {
	j.mu.Lock()
	n := j.memBytes
	j.mu.Unlock()
	if n <= j.opts.MaxLogBytes {
		return nil
	}
	j.wakeCheckpointer() // space may have come back
	why := "it is writing"
	if err := j.checkpointErr(); err != nil {
		why = "its last one failed: " + err.Error()
	}
	return fmt.Errorf("%w: journal %s: the write-ahead log holds %d MiB not yet in the file, over its limit of %d MiB (journal-max-log): the checkpoint into the file is behind (%s); nothing already acknowledged is lost",
		ErrLogFull, j.path, n>>20, j.opts.MaxLogBytes>>20, why)
}

// ErrLogFull refuses a write while the log is over its limit.
var ErrLogFull = errors.New("journal log is full")

// View implements store.KV: a clone of the memtable (one moment) over a
// bbolt read transaction begun after it.
func (k logKV) View(fn func(t store.Tx) error) error {
	j := k.j
	j.mu.Lock()
	if j.snap == nil {
		j.snap = j.active.Clone()
	}
	layers := []*tree{j.snap, j.frozen}
	j.mu.Unlock()
	j.dbmu.RLock()
	defer j.dbmu.RUnlock()
	return j.guard(func() error {
		return j.db.View(func(btx *bolt.Tx) error {
			t := &viewTx{reader{j: j, layers: layers, btx: btx}}
			if err := fn(t); err != nil {
				return err
			}
			return t.first
		})
	})
}

// guard turns a panic of bbolt on a damaged file (a page that is not what
// it says, a bad freelist) into an error naming the file.
func (j *Journal) guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a length pointing past the mapped file
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: journal %s: bbolt failed reading it (%v): the file is damaged; emq journal check --data-dir says where", store.ErrCorrupt, j.path, p)
		}
	}()
	return fn()
}

// replay applies the log's records after the checkpoint at open.
func (j *Journal) replay(seq uint64, rec []byte) error {
	over, err := decodeBatch(rec)
	if err != nil {
		return fmt.Errorf("%w: journal %s: log record %d: %v", store.ErrCorrupt, j.path, seq, err)
	}
	return j.guard(func() error {
		return j.db.View(func(btx *bolt.Tx) error {
			j.mu.Lock()
			defer j.mu.Unlock()
			markBelow(over, nil, btx)
			j.apply(over)
			if it, ok := j.active.Get(&item{key: seqKey}); ok && !it.del && len(it.val) == 8 {
				j.seq = max(j.seq, binary.BigEndian.Uint64(it.val))
			}
			j.applied = seq
			return nil
		})
	})
}
