// Package migrations holds the numbered schema steps of the bbolt journal
// file and applies them in order.
//
// The schema version lives in the meta bucket under the key "schema" as a
// decimal string. A file at version N has had steps 1..N applied, each in
// its own transaction together with the version bump, so a crash between
// steps leaves a file at a clean version. Applying is idempotent: steps
// already applied are skipped. A file whose version is newer than the last
// step this binary knows is refused, never rewritten.
//
// A step must be written once and never changed after it ships; a new
// layout is a new step.
package migrations

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
)

// The journal's buckets are store's layout (store.BucketJobs, ...); the
// steps create them: result_exp since step 2, schedules since 3, queues
// since 4, done since 5, cancelled, unique and unique_exp since 7, the
// workflows' since 8, tenants and limiters since 9.
var (
	meta      = store.BucketMeta
	schemaKey = store.SchemaKey
)

// Step is one schema change.
type Step struct {
	Version int
	Name    string
	Apply   func(tx *bolt.Tx) error
	// Before, if set, runs ahead of Apply's transaction, in transactions
	// of its own of bounded size: the step's work that grows with the
	// file. It must pick up where an interrupted run stopped.
	Before func(db *bolt.DB) error
}

// ErrTooNew means the file was written by a newer EMQ than this one.
var ErrTooNew = store.ErrTooNew

// Steps is every step this binary knows, in order.
var Steps = []Step{
	{1, "create the journal buckets", func(tx *bolt.Tx) error {
		for _, b := range [][]byte{store.BucketMeta, store.BucketJobs, store.BucketPending, store.BucketDead, store.BucketResults} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}, nil},
	{2, "index results by expiry", func(tx *bolt.Tx) error {
		idx, err := tx.CreateBucketIfNotExists(store.BucketResultExp)
		if err != nil {
			return err
		}
		return tx.Bucket(store.BucketResults).ForEach(func(msgid, v []byte) error {
			if len(v) < 8 {
				return fmt.Errorf("result %q is %d bytes, too short for its expiry", msgid, len(v))
			}
			return idx.Put(store.ResultExpKey(v[:8], msgid), nil)
		})
	}, nil},
	{3, "keep schedules", func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(store.BucketSchedules)
		return err
	}, nil},
	{4, "keep queue controls", func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(store.BucketQueues)
		return err
	}, nil},
	{5, "keep done jobs", func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(store.BucketDone)
		return err
	}, nil},
	{6, "seal every value with its checksum; the job sequence in meta; a bucket for damaged values", finishSealing, sealInChunks},
	{7, "keep cancelled jobs and unique keys", func(tx *bolt.Tx) error {
		for _, b := range [][]byte{store.BucketCancelled, store.BucketUnique, store.BucketUniqueExp} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}, nil},
	{8, "workflows: waiting jobs, who waits for whom, batches", func(tx *bolt.Tx) error {
		for _, b := range [][]byte{store.BucketWaiting, store.BucketAfter, store.BucketBatches, store.BucketAfterB, store.BucketSettling} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}, nil},
	{9, "fair shares and named limiters: tenants' settings, limiters", func(tx *bolt.Tx) error {
		for _, b := range [][]byte{store.BucketTenants, store.BucketLimiters} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}, nil},
}

// Encrypt is the step of a file that may hold values encrypted at rest
// (store/encrypt.go; meta/keys names the keys): nothing to change, but a
// binary that knows no such values refuses the file (ErrTooNew) rather
// than misread them. It is applied only to a journal opened with keys
// (ApplyEncrypt): a file that was never encrypted needs no migration and
// stays at Latest. A step after it follows it (11).
var Encrypt = Step{10, "encryption at rest: values may be encrypted (meta/keys names the keys)", func(*bolt.Tx) error { return nil }, nil}

// Step 6 gives every value but the schema version its checksum
// (store.Seal), moves the job sequence from the jobs bucket's own to
// meta/seq (the write-ahead log keeps it as a key), and makes the damaged
// bucket. The values are rewritten first (sealInChunks), in transactions
// of at most sealChunk bytes, each noting in meta/sealing how far it
// went: an upgrade holds no more than that in memory, whatever the
// file's size, and one interrupted goes on where it stopped, never
// sealing a value twice. finishSealing is the step's own transaction.
var sealing = [][]byte{store.BucketJobs, store.BucketPending, store.BucketDead, store.BucketResults,
	store.BucketResultExp, store.BucketSchedules, store.BucketQueues, store.BucketDone}

var sealingKey = []byte("sealing") // bucket index (1 byte), then the last key sealed

var sealChunk = 16 << 20 // a variable for the tests

func sealInChunks(db *bolt.DB) error {
	for {
		if finished, err := sealOne(db); err != nil || finished {
			return err
		}
	}
}

// sealOne seals the next chunk in one transaction.
func sealOne(db *bolt.DB) (finished bool, err error) {
	err = db.Update(func(tx *bolt.Tx) error {
		mb, err := tx.CreateBucketIfNotExists(meta)
		if err != nil {
			return err
		}
		bi, from := 0, []byte(nil)
		if p := mb.Get(sealingKey); len(p) >= 1 {
			bi, from = int(p[0]), bytes.Clone(p[1:])
		}
		if bi >= len(sealing) {
			finished = true
			return nil
		}
		type kv struct{ k, v []byte }
		var chunk []kv
		more := false
		if bkt := tx.Bucket(sealing[bi]); bkt != nil {
			c := bkt.Cursor()
			k, v := c.First()
			if from != nil {
				if k, v = c.Seek(from); k != nil && bytes.Equal(k, from) {
					k, v = c.Next()
				}
			}
			for size := 0; k != nil; k, v = c.Next() {
				if size >= sealChunk {
					more = true
					break
				}
				chunk = append(chunk, kv{bytes.Clone(k), bytes.Clone(v)})
				size += len(k) + len(v)
			}
			for _, e := range chunk {
				if err := bkt.Put(e.k, store.Seal(sealing[bi], e.k, e.v)); err != nil {
					return err
				}
			}
		}
		next := []byte{byte(bi + 1)}
		if more {
			next = append([]byte{byte(bi)}, chunk[len(chunk)-1].k...)
		}
		return mb.Put(sealingKey, next)
	})
	return finished, err
}

func finishSealing(tx *bolt.Tx) error {
	mb := tx.Bucket(meta)
	if p := mb.Get(sealingKey); len(p) < 1 || int(p[0]) < len(sealing) {
		return fmt.Errorf("the values are not all sealed (meta/sealing %x)", p)
	}
	if err := mb.Delete(sealingKey); err != nil {
		return err
	}
	var seq uint64
	if jobs := tx.Bucket(store.BucketJobs); jobs != nil {
		seq = jobs.Sequence()
	}
	seqKey := []byte("seq")
	if err := mb.Put(seqKey, store.Seal(store.BucketMeta, seqKey, binary.BigEndian.AppendUint64(nil, seq))); err != nil {
		return err
	}
	_, err := tx.CreateBucketIfNotExists(store.BucketDamaged)
	return err
}

// Latest is the version the last known step brings a file to.
func Latest() int { return Steps[len(Steps)-1].Version }

// Known is the newest version this binary reads: Encrypt's.
func Known() int { return Encrypt.Version }

// ApplyEncrypt is Apply, then Encrypt (a journal opened with keys).
func ApplyEncrypt(db *bolt.DB) (from, to int, err error) {
	return ApplySteps(db, append(slices.Clone(Steps), Encrypt))
}

// Version returns the schema version of the file; 0 for a new file.
func Version(tx *bolt.Tx) (int, error) {
	meta := tx.Bucket(meta)
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(schemaKey)
	if v == nil {
		return 0, nil
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil {
		return 0, fmt.Errorf("journal schema version %q is not a number", v)
	}
	return n, nil
}

// Status is one step and whether the file has it.
type Status struct {
	Step
	Applied bool
}

// Check returns the file's version and each known step's status. It fails
// with ErrTooNew when the file is newer than this binary.
func Check(db *bolt.DB) (int, []Status, error) {
	var v int
	err := db.View(func(tx *bolt.Tx) (err error) {
		v, err = Version(tx)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	st := make([]Status, len(Steps))
	for i, s := range Steps {
		st[i] = Status{Step: s, Applied: s.Version <= v}
	}
	if v >= Encrypt.Version {
		st = append(st, Status{Step: Encrypt, Applied: true})
	}
	if v > Known() {
		return v, st, fmt.Errorf("%w: the file is at version %d, this binary knows up to %d", ErrTooNew, v, Known())
	}
	return v, st, nil
}

// Apply brings the file up to the last step and returns the versions it
// moved between.
func Apply(db *bolt.DB) (from, to int, err error) {
	return ApplySteps(db, Steps)
}

// ApplySteps applies the given steps (in order, each in one transaction)
// that the file does not have yet.
func ApplySteps(db *bolt.DB, steps []Step) (from, to int, err error) {
	from, _, err = Check(db)
	if err != nil {
		return from, from, err
	}
	to = from
	for _, s := range steps {
		if s.Version <= to {
			continue
		}
		if s.Version != to+1 {
			return from, to, fmt.Errorf("migration %d (%s) does not follow version %d", s.Version, s.Name, to)
		}
		if s.Before != nil {
			if err := s.Before(db); err != nil {
				return from, to, fmt.Errorf("migration %d (%s): %w", s.Version, s.Name, err)
			}
		}
		err := db.Update(func(tx *bolt.Tx) error {
			if err := s.Apply(tx); err != nil {
				return err
			}
			meta, err := tx.CreateBucketIfNotExists(meta)
			if err != nil {
				return err
			}
			return meta.Put(schemaKey, []byte(strconv.Itoa(s.Version)))
		})
		if err != nil {
			return from, to, fmt.Errorf("migration %d (%s): %w", s.Version, s.Name, err)
		}
		to = s.Version
	}
	return from, to, nil
}
