package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
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
//  2. on the checkpointer's goroutine: frozen is written into bbolt in
//     one transaction (two fdatasyncs, off every ACK's path), every
//     value sealed with its checksum, with meta/checkpoint, the sequence;
//  3. frozen is dropped, and the log's segments wholly at or below that
//     sequence are deleted.
//
// A crash at any step leaves bbolt at its last checkpoint and the log
// holding what came after: opening replays it. A checkpoint that fails
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
	err := j.writeBolt(at, frozen)
	stop()
	j.dbmu.RUnlock()
	j.setCheckpointErr(err)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.frozen, j.snap = nil, nil
	j.memBytes = treeBytes(j.active)
	j.mu.Unlock()
	j.checkpointed.Store(at.seq)
	if j.opts.OnCheckpoint != nil {
		j.opts.OnCheckpoint(frozen.Len(), time.Since(start))
	}
	return j.log.TruncateFront(at.seq)
}

// writeBolt writes the layers' items (oldest first, so that newer ones
// win) into bbolt in one transaction, sealed, with meta/checkpoint at.
// The caller holds dbmu for reading, and no read transaction of its own
// (bbolt's write may need to grow the mapping).
func (j *Journal) writeBolt(at checkpointAt, layers ...*tree) error {
	return j.guard(func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{store.BucketJobs, store.BucketPending} {
				if bkt := tx.Bucket(name); bkt != nil {
					bkt.FillPercent = appendFill
				}
			}
			var err error
			for _, t := range layers {
				if t == nil {
					continue
				}
				t.Ascend(func(it *item) bool {
					bkt := tx.Bucket(buckets[it.bucket])
					if bkt == nil {
						err = fmt.Errorf("journal %s: no bucket %s in the file", j.path, buckets[it.bucket])
						return false
					}
					if it.del {
						err = bkt.Delete(it.key)
					} else {
						err = bkt.Put(it.key, sealed(buckets[it.bucket], it.key, it.val))
					}
					return err == nil
				})
				if err != nil {
					return err
				}
			}
			meta := tx.Bucket(store.BucketMeta)
			return meta.Put(checkpointKey, sealed(store.BucketMeta, checkpointKey, at.encode()))
		})
	})
}

func treeBytes(t *tree) int64 {
	var n int64
	t.Ascend(func(it *item) bool { n += it.size(); return true })
	return n
}

// direct writes a batch too large for the log into bbolt, with the
// memtable before it, in one transaction; its ACK waits for that commit
// (two fdatasyncs). Memory stays bounded: a large job is not copied
// into the memtable to wait for a checkpoint.
func (j *Journal) direct(t *batchTx, btx *bolt.Tx) error {
	btx.Rollback()  // the batch's reads are done; bbolt may grow its mapping
	j.ckptMu.Lock() // no checkpoint writes meanwhile
	defer j.ckptMu.Unlock()
	j.mu.Lock()
	frozen, active, at := j.frozen, j.active, checkpointAt{j.applied, j.log.End()}
	j.mu.Unlock()
	if err := j.writeBolt(at, frozen, active, t.over); err != nil {
		return err
	}
	j.mu.Lock()
	j.frozen, j.active, j.snap, j.memBytes = nil, newTree(), nil, 0
	j.seq = t.seq
	j.mu.Unlock()
	j.checkpointed.Store(at.seq)
	return j.log.TruncateFront(at.seq)
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
