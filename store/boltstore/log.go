package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/wal"
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

// encodeBatch encodes a batch's changes as a log record. Each value of
// logMin bytes or more gets a ref with its offset in the record, its
// length and its checksum, for logValues once the record is written;
// large says how many.
func encodeBatch(over *tree) (rec []byte, large int) {
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
			if len(it.val) >= logMin {
				it.ref = &logRef{at: wal.Position{Offset: int64(len(b))}, n: uint32(len(it.val)), sum: crc32.Checksum(it.val, castagnoli)}
				large++
			}
			b = append(b, it.val...)
		}
		return true
	})
	return b, large
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logValues lets go of the large values of a batch just written as the
// log record at rec (encodeBatch noted them): each item keeps where its
// value lies, and its head.
func logValues(over *tree, rec wal.Position) {
	over.Ascend(func(it *item) bool {
		if it.ref != nil && !it.del {
			it.ref.at = wal.Position{Segment: rec.Segment, Offset: rec.Offset + it.ref.at.Offset}
			it.setHead()
			it.val = nil
		}
		return true
	})
}

// setHead keeps a logged value's part, if small.
func (it *item) setHead() {
	if part, whole := store.Part(buckets[it.bucket], it.key, it.val); !whole && len(part) <= headMax {
		it.ref.head = bytes.Clone(part)
	}
}

// decodeBatch reads a record's changes into a tree, every value copied;
// with at (where the record lies in the log), a value of logMin bytes or
// more is left there (logValues).
func decodeBatch(rec []byte, at *wal.Position) (*tree, error) {
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
		it.key = bytes.Clone(it.key)
		if !it.del {
			if it.val, b, ok = lenBytes(b); !ok {
				return nil, fmt.Errorf("a log record cut short")
			}
			if at != nil && len(it.val) >= logMin {
				off := int64(len(rec) - len(b) - len(it.val))
				it.ref = &logRef{at: wal.Position{Segment: at.Segment, Offset: at.Offset + off}, n: uint32(len(it.val)), sum: crc32.Checksum(it.val, castagnoli)}
				it.setHead()
				it.val = nil
			} else {
				it.val = bytes.Clone(it.val)
			}
		}
		over.ReplaceOrInsert(it)
	}
	return over, nil
}

// lenBytes reads a uvarint length and that many bytes (not copied).
func lenBytes(b []byte) ([]byte, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
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
	rec, large := encodeBatch(t.over)
	if int64(len(rec)) > j.opts.DirectBytes || int64(len(rec)) > j.log.MaxRecord() {
		return j.direct(t, btx)
	}
	last, err := j.log.Append([][]byte{rec}, durable)
	if err != nil {
		return err
	}
	if large > 0 {
		logValues(t.over, j.log.LastAppended())
	}
	j.mu.Lock()
	j.apply(t.over)
	j.seq, j.applied = t.seq, last
	j.activeLog += int64(len(rec))
	due := (j.memBytes >= j.opts.CheckpointBytes || j.activeLog >= j.opts.CheckpointBytes) && j.frozen == nil
	j.mu.Unlock()
	if due {
		j.freeze()
		j.wakeCheckpointer()
	}
	return nil
}

// overLimit is the refusal of a write that must be durable while what
// the log holds and bbolt not yet, or the memtable, is over MaxLogBytes.
func (j *Journal) overLimit() error {
	j.mu.Lock()
	n := max(j.memBytes, j.activeLog+j.frozenLog)
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
// bbolt read transaction begun after it. The log's segments it may read
// are kept until it ends (pin).
func (k logKV) View(fn func(t store.Tx) error) error {
	j := k.j
	j.mu.Lock()
	if j.snap == nil {
		j.snap = j.active.Clone()
	}
	layers := []*tree{j.snap, j.frozen}
	pin := j.pin()
	j.mu.Unlock()
	defer j.unpin(pin)
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
func (j *Journal) replay(r wal.Record) error {
	seq := r.Seq
	over, err := decodeBatch(r.Data, &r.At)
	if err != nil {
		return fmt.Errorf("%w: journal %s: log record %d: %v", store.ErrCorrupt, j.path, seq, err)
	}
	j.activeLog += int64(len(r.Data))
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
