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
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
)

// The journal's buckets are store's layout (store.BucketJobs, ...); the
// steps create them: result_exp since step 2, schedules since 3, queues
// since 4, done since 5.
var (
	meta      = store.BucketMeta
	schemaKey = []byte("schema")
)

// Step is one schema change.
type Step struct {
	Version int
	Name    string
	Apply   func(tx *bolt.Tx) error
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
	}},
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
	}},
	{3, "keep schedules", func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(store.BucketSchedules)
		return err
	}},
	{4, "keep queue controls", func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(store.BucketQueues)
		return err
	}},
	{5, "keep done jobs", func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(store.BucketDone)
		return err
	}},
	{6, "seal every value with its checksum; the job sequence in meta; a bucket for damaged values", sealEverything},
}

// sealEverything is step 6: every value but the schema version gets its
// checksum (store.Seal), the job sequence moves from the jobs bucket's
// own to meta/seq (the write-ahead log keeps it as a key), and the
// damaged bucket is made. Values are rewritten a chunk at a time, in the
// one transaction of the step: an upgrade holds about the file's size in
// memory for that moment, once.
func sealEverything(tx *bolt.Tx) error {
	for _, name := range [][]byte{store.BucketJobs, store.BucketPending, store.BucketDead, store.BucketResults,
		store.BucketResultExp, store.BucketSchedules, store.BucketQueues, store.BucketDone} {
		bkt := tx.Bucket(name)
		if bkt == nil {
			continue
		}
		var from []byte
		for {
			type kv struct{ k, v []byte }
			var chunk []kv
			c := bkt.Cursor()
			k, v := c.First()
			if from != nil {
				k, v = c.Seek(from)
				if k != nil && bytes.Equal(k, from) {
					k, v = c.Next()
				}
			}
			for ; k != nil && len(chunk) < 4096; k, v = c.Next() {
				chunk = append(chunk, kv{bytes.Clone(k), bytes.Clone(v)})
			}
			for _, e := range chunk {
				if err := bkt.Put(e.k, store.Seal(name, e.k, e.v)); err != nil {
					return err
				}
			}
			if len(chunk) < 4096 {
				break
			}
			from = chunk[len(chunk)-1].k
		}
	}
	mb := tx.Bucket(meta)
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
	if v > Latest() {
		return v, st, fmt.Errorf("%w: the file is at version %d, this binary knows up to %d", ErrTooNew, v, Latest())
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
