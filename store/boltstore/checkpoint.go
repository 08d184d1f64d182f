package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/wal"
)

// A checkpoint brings bbolt up to date with the log, behind the ACKs:
//
//  1. freeze, on the committer (between two batches): active becomes
//     frozen, with the sequence of the last record in it, and a new
//     active begins;
//  2. on the checkpointer's goroutine: frozen is written into bbolt
//     (two fdatasyncs a transaction, off every ACK's path), every value
//     sealed with its checksum (a logged one read back from the log), in
//     transactions of about CheckpointBytes of values, the last with
//     meta/checkpoint, the sequence;
//  3. frozen is dropped, and the log's segments wholly at or below that
//     sequence are deleted, but for those a view still reads (pin).
//
// A crash at any step leaves meta/checkpoint at the last checkpoint and
// the log holding what came after: opening replays it, over any of
// frozen's values already written. A checkpoint that fails
// (bbolt's disk full, an I/O error) leaves frozen as it is, is retried,
// and the memtable grows until MaxLogBytes, past which writes that must
// be durable are refused (overLimit).

// checkpointKey is where meta keeps the last log sequence bbolt holds,
// and where in the log that record ends: 8 bytes (older files), or 24.
// checkpointAt is what it holds.
var checkpointKey = []byte("checkpoint")

type checkpointAt struct {
	seq uint64
	end wal.Position // zero: not known
}

func (c checkpointAt) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, c.seq)
	b = binary.BigEndian.AppendUint64(b, c.end.Segment)
	return binary.BigEndian.AppendUint64(b, uint64(c.end.Offset))
}

// freeze makes active frozen (on the committer, or with it stopped), if
// no checkpoint is under way and there is something to write.
func (j *Journal) freeze() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.frozen != nil || j.active.Len() == 0 {
		return
	}
	j.frozen, j.frozenUpto = j.active, checkpointAt{j.applied, j.log.End()}
	j.active, j.snap = newTree(), nil
	j.frozenLog, j.activeLog = j.activeLog, 0
}

func (j *Journal) wakeCheckpointer() {
	select {
	case j.ckptWake <- struct{}{}:
	default:
	}
}

// checkpointer writes frozen into bbolt when woken, and every
// CheckpointEvery while the memtable holds something, until Close.
func (j *Journal) checkpointer() {
	defer close(j.ckptDone)
	tick := time.NewTicker(j.opts.CheckpointEvery)
	defer tick.Stop()
	failures := 0
	for {
		select {
		case <-j.ckptStop:
			return
		case <-j.ckptWake:
		case <-tick.C:
			// Time is up: freeze on the committer (a write of its own
			// that runs between two batches).
			j.mu.Lock()
			idle := j.frozen == nil && j.active.Len() > 0
			j.mu.Unlock()
			if idle {
				done := make(chan struct{})
				j.Core.Alone(func() { j.freeze(); close(done) }, func(error) { close(done) })
				select {
				case <-done:
				case <-j.ckptStop:
					return
				}
			}
		}
		if err := j.checkpoint(); err != nil {
			failures++
			if failures == 1 || failures%100 == 0 {
				j.opts.Logger.Error("journal checkpoint failed; the log keeps what it has and the checkpoint is tried again", "journal", j.path, "err", err, "failures", failures)
			}
			// Wait a little before the next try, or less when a write is
			// refused meanwhile (space may have come back), but 100 ms at
			// least: a disk that stays full is not hammered.
			select {
			case <-j.ckptStop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			select {
			case <-j.ckptStop:
				return
			case <-j.ckptWake:
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, 5*time.Second)):
			}
			j.wakeCheckpointer()
			continue
		}
		failures = 0
	}
}

// checkpoint writes frozen, if any, into bbolt and drops it.
func (j *Journal) checkpoint() error {
	j.ckptMu.Lock()
	defer j.ckptMu.Unlock()
	j.mu.Lock()
	frozen, at := j.frozen, j.frozenUpto
	j.mu.Unlock()
	if frozen == nil {
		return nil
	}
	if err := j.structureChecked(); err != nil {
		return err
	}
	start := time.Now()
	j.dbmu.RLock()
	// bbolt copies every value left on a leaf it rewrites, from the mapping.
	stop := dropWhile(func() { dropDB(j.db) })
	err := j.writeBolt(at, nil, frozen)
	stop()
	j.dbmu.RUnlock()
	j.setCheckpointErr(err)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.frozen, j.snap = nil, nil
	j.memBytes = treeBytes(j.active)
	j.frozenLog = 0
	j.mu.Unlock()
	j.checkpointed.Store(at.seq)
	if j.opts.OnCheckpoint != nil {
		j.opts.OnCheckpoint(frozen.Len(), time.Since(start))
	}
	return j.truncate(at.seq)
}

// The log's segments that bbolt holds wholly are deleted (truncate),
// but for those a view may still read: a view reads the memtable's
// logged values from the log, so it pins the records from the first
// not in bbolt on until it ends, and the deletion of those waits for
// it (the next checkpoint, or the view's end, catches up).

// pin keeps the log's records from the first not in bbolt on, until
// unpin (under j.mu).
func (j *Journal) pin() uint64 {
	from := j.checkpointed.Load() + 1
	if j.pins == nil {
		j.pins = map[uint64]int{}
	}
	j.pins[from]++
	return from
}

func (j *Journal) unpin(from uint64) {
	j.mu.Lock()
	if j.pins[from]--; j.pins[from] == 0 {
		delete(j.pins, from)
	}
	j.mu.Unlock()
	_ = j.truncate(0) // one held back by this pin goes now; a failure is the next checkpoint's to report
}

// truncate deletes the log's segments wholly at or below upto, and any
// a pin held back before, but for those pinned now.
func (j *Journal) truncate(upto uint64) error {
	if j.opts.ReadOnly {
		return nil // another process's log
	}
	j.mu.Lock()
	j.truncTo = max(j.truncTo, upto)
	upto = j.truncTo
	for from := range j.pins {
		upto = min(upto, from-1)
	}
	j.mu.Unlock()
	return j.log.TruncateFront(upto)
}

// writeBolt writes the layers' items (oldest first, so that newer ones
// win) into bbolt, sealed, then last's and meta/checkpoint at, in
// transactions of about CheckpointBytes of values each (one when they
// fit): bbolt holds a transaction's pages in memory until it commits.
// last goes whole into the last transaction. That is safe: until the
// last commits, meta/checkpoint says the log holds the layers (a crash
// replays them over what was written), and the layers shadow the keys
// written for every reader. The caller holds dbmu for reading, and no
// read transaction of its own (bbolt's write may need to grow the
// mapping).
func (j *Journal) writeBolt(at checkpointAt, last *tree, layers ...*tree) error {
	layers = slices.DeleteFunc(layers, func(t *tree) bool { return t == nil })
	var from *item // where the next transaction goes on in layers[0]
	for {
		final := false
		err := j.boltUpdate(func(tx *bolt.Tx) error {
			room := j.txBytes
			for len(layers) > 0 {
				done, next, n, err := j.putItems(tx, layers[0], from, room)
				if err != nil {
					return err
				}
				if room -= n; !done {
					from = next
					return nil // full: the next transaction goes on
				}
				layers, from = layers[1:], nil
			}
			final = true
			if last != nil {
				if _, _, _, err := j.putItems(tx, last, nil, -1); err != nil {
					return err
				}
			}
			meta := tx.Bucket(store.BucketMeta)
			return meta.Put(checkpointKey, sealed(store.BucketMeta, checkpointKey, at.encode()))
		})
		if err != nil || final {
			return err
		}
		j.mu.Lock()
		hook := j.betweenTxs
		j.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
}

// boltUpdate is a bbolt write transaction, guarded, with the append-only
// buckets packed full.
func (j *Journal) boltUpdate(fn func(tx *bolt.Tx) error) error {
	return j.guard(func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{store.BucketJobs, store.BucketPending} {
				if bkt := tx.Bucket(name); bkt != nil {
					bkt.FillPercent = appendFill
				}
			}
			return fn(tx)
		})
	})
}

// putItems writes t's items from from on (nil: the first) into tx, while
// the bytes of values written are under limit (-1: all), and says whether
// it reached the end or the item to go on from, and the bytes written.
func (j *Journal) putItems(tx *bolt.Tx, t *tree, from *item, limit int64) (done bool, next *item, n int64, err error) {
	done = true
	each := func(it *item) bool {
		if limit >= 0 && n >= limit {
			done, next = false, it
			return false
		}
		bkt := tx.Bucket(buckets[it.bucket])
		if bkt == nil {
			err = fmt.Errorf("journal %s: no bucket %s in the file", j.path, buckets[it.bucket])
			return false
		}
		switch {
		case it.del:
			err = bkt.Delete(it.key)
		case it.logged():
			var v []byte
			if v, err = j.sealLogged(it); err == nil {
				err = bkt.Put(it.key, v)
			}
			n += int64(it.ref.n)
		default:
			err = bkt.Put(it.key, sealed(buckets[it.bucket], it.key, it.val))
			n += int64(len(it.val))
		}
		return err == nil
	}
	if from == nil {
		t.Ascend(each)
	} else {
		t.AscendGreaterOrEqual(from, each)
	}
	return done, next, n, err
}

// sealLogged reads a logged value back and seals it for bbolt. One that
// fails its checksum in the log is written with a seal that fails too:
// the damage stays named where it is read (quarantine), never served.
func (j *Journal) sealLogged(it *item) ([]byte, error) {
	v, ok, err := j.readLogged(it)
	if err != nil {
		return nil, err
	}
	v = store.AppendSeal(buckets[it.bucket], it.key, v)
	if !ok {
		j.opts.Logger.Error("journal: a value in the log fails its checksum; it goes into the file marked damaged, to be set aside where it is read",
			"journal", j.path, "bucket", string(buckets[it.bucket]), "key", fmt.Sprintf("%q", it.key), "segment", it.ref.at.Segment, "offset", it.ref.at.Offset)
		v[len(v)-1] ^= 0xff
	}
	return v, nil
}

// readLogged reads a logged value back from the log, with room for a
// seal after it; ok is false when it fails its checksum.
func (j *Journal) readLogged(it *item) (v []byte, ok bool, err error) {
	v = make([]byte, it.ref.n, it.ref.n+4)
	if err := j.log.ReadAt(v, it.ref.at); err != nil {
		return nil, false, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return v, crc32.Checksum(v, castagnoli) == it.ref.sum, nil
}

func treeBytes(t *tree) int64 {
	var n int64
	t.Ascend(func(it *item) bool { n += it.size(); return true })
	return n
}

// direct writes a batch too large for the log into bbolt, after the
// memtable (writeBolt: the batch whole in the last transaction); its
// ACK waits for that commit (two fdatasyncs). Memory stays bounded: a large job is not copied
// into the memtable to wait for a checkpoint.
func (j *Journal) direct(t *batchTx, btx *bolt.Tx) error {
	btx.Rollback()  // the batch's reads are done; bbolt may grow its mapping
	j.ckptMu.Lock() // no checkpoint writes meanwhile
	defer j.ckptMu.Unlock()
	j.mu.Lock()
	frozen, active, at := j.frozen, j.active, checkpointAt{j.applied, j.log.End()}
	j.mu.Unlock()
	if err := j.writeBolt(at, t.over, frozen, active); err != nil {
		return err
	}
	j.mu.Lock()
	j.frozen, j.active, j.snap, j.memBytes = nil, newTree(), nil, 0
	j.frozenLog, j.activeLog = 0, 0
	j.seq = t.seq
	j.mu.Unlock()
	j.checkpointed.Store(at.seq)
	return j.truncate(at.seq)
}

func (j *Journal) setCheckpointErr(err error) {
	j.mu.Lock()
	j.ckptErr = err
	j.mu.Unlock()
}

func (j *Journal) checkpointErr() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ckptErr
}

// readCheckpoint is the log position bbolt holds, and the job sequence.
func readCheckpoint(db *bolt.DB, path string) (at checkpointAt, seq uint64, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(store.BucketMeta)
		if meta == nil {
			return nil
		}
		for _, key := range [][]byte{checkpointKey, seqKey} {
			v := meta.Get(key)
			if v == nil {
				continue
			}
			val, ok := unseal(store.BucketMeta, key, v)
			if !ok || !(len(val) == 8 || len(val) == 24 && bytes.Equal(key, checkpointKey)) {
				return fmt.Errorf("%w: journal %s: meta/%s fails its checksum: emq journal check --data-dir says more, emq journal salvage keeps what is good",
					store.ErrCorrupt, path, key)
			}
			if bytes.Equal(key, seqKey) {
				seq = binary.BigEndian.Uint64(val)
				continue
			}
			at.seq = binary.BigEndian.Uint64(val)
			if len(val) == 24 {
				at.end = wal.Position{Segment: binary.BigEndian.Uint64(val[8:]), Offset: int64(binary.BigEndian.Uint64(val[16:]))}
			}
		}
		return nil
	})
	return at, seq, err
}
