package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/wal"
)

// CheckReport is what Check found in a journal (emq journal check).
type CheckReport struct {
	File string `json:"file"`
	// Structure: bbolt's own check of the file's pages (an unreadable
	// page, a page in use twice, ...), or why it could not be read.
	Structure []string `json:"structure,omitempty"`
	// Values read and checked; Damaged are those failing their checksum.
	Values  int            `json:"values"`
	Damaged []store.Damage `json:"damaged,omitempty"`
	// Jobs stored; Dangling are index entries that name no stored job or
	// a job in another place, Unindexed jobs no index names.
	Jobs      int      `json:"jobs"`
	Dangling  []string `json:"dangling,omitempty"`
	Unindexed []string `json:"unindexed,omitempty"`
	// Quarantined: what was moved aside before (the damaged bucket).
	Quarantined []store.DamagedEntry `json:"quarantined,omitempty"`
	// The log: its checkpoint, the records after it, a torn tail (which
	// the next open cuts: never acknowledged), damaged stretches.
	Checkpoint uint64    `json:"checkpoint"`
	Records    int       `json:"log_records"`
	Torn       *wal.Cut  `json:"torn,omitempty"`
	LogDamage  []wal.Cut `json:"log_damage,omitempty"`
	// LogPassed: damage in records already checkpointed, which opening
	// skips: nothing lost, but the disk changed what was written.
	LogPassed []wal.Cut `json:"log_damage_checkpointed,omitempty"`
	// EncryptedWith names the keys the journal was ever encrypted with
	// at rest (meta/keys); none: it never was.
	EncryptedWith []string `json:"encrypted_with"`
	// With keys given (CheckSealed): the values holding secrets by the
	// key sealing them ("" in clear), and those that do not open (their
	// tag fails: damage; or a key not given).
	SealedBy map[string]int64 `json:"sealed_by,omitempty"`
	Unsealed []store.Damage   `json:"unsealed,omitempty"`
}

// OK reports a journal with nothing wrong but, perhaps, a torn tail (a
// write never acknowledged, which opening cuts) and what was moved aside
// before. Damage that loses nothing (LogPassed) is still damage: a disk
// that changes bytes is not OK.
func (r CheckReport) OK() bool {
	return len(r.Structure) == 0 && len(r.Damaged) == 0 && len(r.Dangling) == 0 && len(r.Unindexed) == 0 &&
		len(r.LogDamage) == 0 && len(r.LogPassed) == 0 && len(r.Unsealed) == 0
}

// Check reads every byte of the journal at path without changing it:
// bbolt's check of its pages, every value's checksum, the indexes
// against the jobs, and every record of the log after the checkpoint.
// It fails only when the file cannot be read at all (locked, missing);
// what is wrong is in the report.
func Check(path string) (CheckReport, error) {
	rep := CheckReport{File: path}
	if _, err := os.Stat(path); err != nil {
		return rep, fmt.Errorf("journal %s: %w", path, err)
	}
	opts := DefaultOptions()
	opts.ReadOnly, opts.LockTimeout = true, 500*time.Millisecond
	db, err := openBolt(path, opts)
	if errors.Is(err, store.ErrLocked) {
		return rep, fmt.Errorf("%w: stop the broker first (a check reads the file as it is)", err)
	}
	if err != nil {
		rep.Structure = append(rep.Structure, err.Error())
		rep.Structure = append(rep.Structure, pageCheck(path)...) // where, page by page
		return rep, nil
	}
	defer db.Close()
	// The pages first: bbolt reading a damaged page of buckets finds no
	// schema version, and takes the file for an old one.
	if problems := pageCheck(path); len(problems) > 0 {
		rep.Structure = append(rep.Structure, problems...)
	} else if err := older(db, path); err != nil {
		rep.Structure = append(rep.Structure, err.Error())
		return rep, nil
	} else {
		rep.Structure = append(rep.Structure, structure(db)...) // it walks the file first: an unsynced freelist is rebuilt safely
	}
	if err := guarded(func() error { return checkValues(db, &rep) }); err != nil {
		rep.Structure = append(rep.Structure, err.Error())
	}
	var at checkpointAt
	if err := guarded(func() (err error) { at, _, err = readCheckpoint(db, path); return err }); err != nil {
		rep.Structure = append(rep.Structure, err.Error())
	}
	rep.Checkpoint = at.seq
	logged := newTree()
	metaID, _ := bucketID(store.BucketMeta)
	keys := []byte(nil)
	_ = db.View(func(tx *bolt.Tx) error {
		if mb := tx.Bucket(store.BucketMeta); mb != nil {
			keys, _ = unseal(store.BucketMeta, store.KeysKey, mb.Get(store.KeysKey))
			keys = bytes.Clone(keys)
		}
		return nil
	})
	lrep, err := replayLog(path, at, true, func(_ uint64, over *tree) {
		logIndexes(logged, over)
		if it, ok := over.Get(&item{bucket: metaID, key: store.KeysKey}); ok && !it.del {
			keys = it.val
		}
	})
	if keys != nil {
		var kerr error
		if rep.EncryptedWith, kerr = store.KeysRecordNames(keys); kerr != nil {
			rep.Structure = append(rep.Structure, kerr.Error())
		}
	}
	if err != nil {
		rep.LogDamage = append(rep.LogDamage, wal.Cut{File: LogDir(path), Reason: err.Error()})
	}
	if err := guarded(func() error { return checkIndexes(db, logged, &rep) }); err != nil {
		rep.Structure = append(rep.Structure, err.Error())
	}
	rep.Records, rep.Torn = lrep.Records, lrep.Torn
	rep.LogDamage = append(rep.LogDamage, lrep.Lost...)
	rep.LogPassed = lrep.Passed
	return rep, nil
}

// structure is bbolt's check of the file's pages, after a walk of every
// value: bbolt's check runs in a goroutine of its own, where a fault
// reading the mapping is not caught, and it reads no value; the walk
// does, where faults are caught.
func structure(db *bolt.DB) (problems []string) {
	if err := walk(db); err != nil {
		return []string{err.Error()}
	}
	// The walk reads no branch's keys; bbolt's check does, and a key's
	// size that points past the file faults in its goroutine, taking the
	// process down. The file's structure is read first, page by page,
	// where nothing faults.
	if problems := pageCheck(db.Path()); len(problems) > 0 {
		return problems
	}
	err := guarded(func() error {
		return db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				problems = append(problems, err.Error())
				if len(problems) == maxProblems {
					// Pages referenced more than once (a branch that
					// points back up its tree) make bbolt's check run for
					// ever, one problem each time round. Its goroutine
					// cannot be stopped: it is left blocked on its next
					// report, holding nothing.
					problems = append(problems, fmt.Sprintf("and more: the check stopped after %d problems", maxProblems))
					break
				}
			}
			return nil
		})
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// maxProblems is how many of bbolt's structure problems a check reports.
const maxProblems = 100

// StoppedCheck names the function of bbolt's structure check that a check
// stopped at maxProblems leaves blocked: tests' leak checks let it be.
const StoppedCheck = "go.etcd.io/bbolt.(*Tx).check"

// older refuses a file of an older schema: its values have no checksums
// to check (the broker's first start, or emq migrate up, seals them).
func older(db *bolt.DB, path string) error {
	var v int
	err := guarded(func() (err error) { v, _, err = migrations.Check(db); return err })
	if err != nil {
		return corrupt(path, err)
	}
	if v < migrations.Latest() {
		return fmt.Errorf("%w: %s is at schema version %d, its values carry no checksums yet: run emq migrate up --data-dir (or start the broker on it) first, then check it",
			ErrOlder, path, v)
	}
	return nil
}

// safeToMigrate refuses a file whose pages are damaged before a
// migration writes into it: bbolt reading a damaged page of buckets finds
// no schema version, and the migrations would write new empty buckets
// over it, every job left where nothing reaches it, not even Salvage.
// Only a file a migration would change is walked.
func safeToMigrate(db *bolt.DB) error {
	if v, _, err := migrations.Check(db); err != nil || v >= migrations.Latest() {
		return nil // Apply says what is wrong, or has nothing to do
	}
	if problems := pageCheck(db.Path()); len(problems) > 0 {
		return fmt.Errorf("%w: its pages are damaged (%s); it was left as it is, not migrated: emq journal check --data-dir says what is wrong, emq journal salvage keeps what is good",
			store.ErrCorrupt, strings.Join(problems[:min(3, len(problems))], "; "))
	}
	return nil
}

// errPanicked marks an error guarded made of a panic.
var errPanicked = errors.New("bbolt failed reading the file")

// corrupt is err naming path, the file damaged, if it is not already.
func corrupt(path string, err error) error {
	if err == nil || errors.Is(err, store.ErrCorrupt) || !errors.Is(err, errPanicked) {
		return err
	}
	return fmt.Errorf("%w: journal %s: %w; the file was left as it is: emq journal check --data-dir says what is wrong", store.ErrCorrupt, path, err)
}

// guarded runs fn, a panic of bbolt's on a damaged page made an error;
// so is a fault reading the mapped file (a length that points past its
// end), which would otherwise end the process.
func guarded(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	return fn()
}

// checkValues checks every value's checksum.
func checkValues(db *bolt.DB, rep *CheckReport) error {
	return db.View(func(tx *bolt.Tx) error {
		for _, name := range buckets {
			bkt := tx.Bucket(name)
			if bkt == nil {
				continue
			}
			err := bkt.ForEach(func(k, v []byte) error {
				if !store.Sealed(name, k) {
					return nil // migrations' own
				}
				if bytes.Equal(name, store.BucketDamaged) {
					if e, ok := store.DecodeDamaged(k, v); ok {
						rep.Quarantined = append(rep.Quarantined, e)
					}
					return nil
				}
				rep.Values++
				if _, ok := unseal(name, k, v); !ok {
					rep.Damaged = append(rep.Damaged, store.Damage{Bucket: bytes.Clone(name), Key: bytes.Clone(k), Reason: "its checksum fails"})
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// indexBuckets are the indexes of job states.
var indexBuckets = [][]byte{store.BucketPending, store.BucketDead, store.BucketDone, store.BucketCancelled, store.BucketWaiting}

// checkIndexes checks that every index entry names a stored job in that
// place, and that every job is in one index: in the file with the log's
// changes after its checkpoint on top (logged: a job's head, an index
// entry's msgid, a tombstone), since a checkpoint may go into the file in
// several transactions, and until the last the file alone may hold a job
// whose index entry is only in the log.
func checkIndexes(db *bolt.DB, logged *tree, rep *CheckReport) error {
	return db.View(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(store.BucketJobs)
		jobsID, _ := bucketID(store.BucketJobs)
		// each calls fn with every live key of bucket and its value
		// (checked): the file's, but for those the log changed, then the
		// log's.
		each := func(bucket []byte, fn func(k, v []byte)) error {
			id, _ := bucketID(bucket)
			if bkt := tx.Bucket(bucket); bkt != nil {
				err := bkt.ForEach(func(k, v []byte) error {
					if logged.Has(&item{bucket: id, key: k}) {
						return nil
					}
					if val, ok := unseal(bucket, k, v); ok {
						fn(k, val)
					}
					return nil // a damaged one is reported by checkValues
				})
				if err != nil {
					return err
				}
			}
			logged.AscendGreaterOrEqual(&item{bucket: id}, func(it *item) bool {
				if it.bucket != id {
					return false
				}
				if !it.del {
					fn(it.key, it.val)
				}
				return true
			})
			return nil
		}
		job := func(id []byte) (rec []byte, stored bool) {
			if it, ok := logged.Get(&item{bucket: jobsID, key: id}); ok {
				return it.val, !it.del
			}
			if jobs == nil {
				return nil, false
			}
			v := jobs.Get(id)
			rec, _ = unseal(store.BucketJobs, id, v)
			return rec, v != nil
		}
		indexed := map[string]bool{}
		for _, name := range indexBuckets {
			err := each(name, func(k, id []byte) {
				rec, stored := job(id)
				ib, ik, err := store.IndexEntry(id, rec)
				switch {
				case !stored:
					rep.Dangling = append(rep.Dangling, fmt.Sprintf("%s/%x names job %q, which is not stored", name, k, id))
				case rec == nil: // damaged: reported by checkValues
				case err != nil || !bytes.Equal(ik, k) || !bytes.Equal(ib, name):
					rep.Dangling = append(rep.Dangling, fmt.Sprintf("%s/%x names job %q, which is elsewhere", name, k, id))
				default:
					indexed[string(id)] = true
				}
			})
			if err != nil {
				return err
			}
		}
		return each(store.BucketJobs, func(k, _ []byte) {
			rep.Jobs++
			if !indexed[string(k)] {
				rep.Unindexed = append(rep.Unindexed, string(k))
			}
		})
	})
}

// logIndexes gathers what a log record changes of the jobs and the
// indexes (the jobs' heads), for checkIndexes.
func logIndexes(into, over *tree) {
	jobsID, _ := bucketID(store.BucketJobs)
	over.Ascend(func(it *item) bool {
		switch {
		case it.bucket == jobsID && !it.del:
			h, err := store.Head(it.key, it.val)
			if err != nil {
				h = nil // fails to decode: checkIndexes names it elsewhere
			}
			into.ReplaceOrInsert(&item{bucket: it.bucket, key: it.key, val: h})
		case it.bucket == jobsID || slices.ContainsFunc(indexBuckets, func(b []byte) bool { return bytes.Equal(b, buckets[it.bucket]) }):
			into.ReplaceOrInsert(it)
		}
		return true
	})
}

// replayLog reads the log of the journal at path after checkpoint,
// read-only, skipping damage (reported), and gives fn each record's
// changes.
func replayLog(path string, at checkpointAt, recover bool, fn func(seq uint64, over *tree)) (wal.Report, error) {
	if _, err := os.Stat(LogDir(path)); errors.Is(err, os.ErrNotExist) {
		return wal.Report{}, nil
	}
	var bad []wal.Cut
	log, rep, err := wal.Open(LogDir(path), wal.Options{ReadOnly: true, Recover: recover, SegmentSize: segmentSizeOf(path), Checkpointed: at.end}, at.seq,
		func(seq uint64, rec []byte) error {
			over, err := decodeBatch(rec, nil)
			if err != nil {
				bad = append(bad, wal.Cut{File: LogDir(path), Reason: fmt.Sprintf("record %d: %v", seq, err)})
				return nil
			}
			fn(seq, over)
			return nil
		})
	if log != nil {
		log.Close()
	}
	rep.Lost = append(rep.Lost, bad...)
	return rep, err
}

// segmentSizeOf is the size of the log's segments on disk (a log made
// with another size than the default opens with its own).
func segmentSizeOf(path string) int64 {
	entries, _ := os.ReadDir(LogDir(path))
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".wal" {
			if fi, err := e.Info(); err == nil && fi.Size() >= 4096 && fi.Size()%8 == 0 {
				return fi.Size()
			}
		}
	}
	return wal.DefaultSegmentSize
}

// SalvageReport is what Salvage kept and could not keep.
type SalvageReport struct {
	From, To   string
	Jobs       int      `json:"jobs"`   // job records kept
	Values     int      `json:"values"` // values kept in all
	LogRecords int      `json:"log_records"`
	Lost       []string `json:"lost,omitempty"` // what could not be kept, each named
	// Pages: why bbolt could not read the file, and what reading it page
	// by page found wrong with it (salvage_pages.go); empty when bbolt
	// read it.
	Pages []string `json:"pages,omitempty"`
}

// Salvage writes every good value of the journal at from, and every good
// record of its log, into a new journal at to (which must not exist): the
// file's values that pass their checksums, with the log's changes after
// its checkpoint on top; the indexes rebuilt from the jobs themselves, so
// that a damaged index loses no job. When bbolt cannot read the file
// (it fails opening it, or a walk of its pages finds one out of place),
// the file is read page by page instead (salvage_pages.go). What could
// not be kept is listed. The journal at from is not changed.
func Salvage(from, to string) (SalvageReport, error) {
	rep := SalvageReport{From: from, To: to}
	if _, err := os.Stat(to); err == nil {
		return rep, fmt.Errorf("salvage: %s exists: name a new file", to)
	}
	if _, err := os.Stat(LogDir(to)); err == nil {
		return rep, fmt.Errorf("salvage: %s exists: name a new file", LogDir(to))
	}
	if fi, err := os.Stat(from); err != nil {
		return rep, fmt.Errorf("journal %s: %w", from, err)
	} else if fi.IsDir() {
		return rep, fmt.Errorf("journal %s is a folder, not a file", from)
	}
	opts := DefaultOptions()
	opts.ReadOnly, opts.LockTimeout = true, 500*time.Millisecond
	src, err := openBolt(from, opts)
	if errors.Is(err, store.ErrLocked) {
		return rep, fmt.Errorf("%w: stop the broker first", err)
	}
	// bbolt reads the file unless it fails opening it, its pages are
	// damaged (pageCheck says which: the page path reads them, and says
	// so), or it fails reading the schema version.
	byBolt := err == nil
	if err != nil {
		rep.Pages = append(rep.Pages, "bbolt cannot read the file: "+err.Error())
	} else {
		defer src.Close()
		// The structure first: bbolt reading a damaged page of buckets
		// finds no schema version, and takes the file for an old one.
		if byBolt = len(pageCheck(from)) == 0; byBolt {
			if err := older(src, from); errors.Is(err, ErrOlder) {
				return rep, err
			} else if err != nil {
				rep.Pages = append(rep.Pages, "bbolt cannot read the file: "+err.Error())
				byBolt = false
			}
		}
	}
	var mem *tree
	var checkpoint checkpointAt
	var seq uint64
	if byBolt {
		mem, checkpoint, seq = boltValues(src, from, &rep)
	} else if mem, checkpoint, seq, err = pageValues(from, &rep); err != nil {
		return rep, err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		return rep, err
	}
	dst, err := bolt.Open(to, 0o600, &bolt.Options{Timeout: time.Second, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return rep, fmt.Errorf("salvage: %s: %w", to, err)
	}
	defer dst.Close()
	if _, _, err := migrations.Apply(dst); err != nil {
		return rep, fmt.Errorf("salvage: %s: %w", to, err)
	}
	// The log's changes after the checkpoint, on top.
	lrep, err := replayLog(from, checkpoint, true, func(_ uint64, over *tree) {
		over.Ascend(func(it *item) bool {
			if it.del {
				mem.Delete(it)
			} else {
				mem.ReplaceOrInsert(it)
			}
			return true
		})
	})
	if err != nil {
		rep.Lost = append(rep.Lost, "the log: "+err.Error())
	}
	rep.LogRecords = lrep.Records
	for _, c := range lrep.Lost {
		rep.Lost = append(rep.Lost, "the log: "+c.String())
	}
	// Into the new file: the jobs with their indexes rebuilt, the results
	// with their expiry index, the rest as it is.
	jobsID, _ := bucketID(store.BucketJobs)
	resultsID, _ := bucketID(store.BucketResults)
	encrypted := false
	err = dst.Update(func(tx *bolt.Tx) error {
		var err error
		mem.Ascend(func(it *item) bool {
			name := buckets[it.bucket]
			switch {
			case bytes.Equal(name, store.BucketMeta) && bytes.Equal(it.key, store.KeysKey):
				encrypted = true // the names of its keys go with its values
			case bytes.Equal(name, store.BucketMeta):
				return true
			case it.bucket == jobsID:
				j, derr := store.DecodeJob(it.key, it.val)
				if derr != nil {
					rep.Lost = append(rep.Lost, fmt.Sprintf("jobs/%q: %v", it.key, derr))
					return true
				}
				seq = max(seq, j.Seq)
				idx := store.IndexOf(j.State)
				if err = tx.Bucket(idx).Put(store.QueueKey(j.Queue, j.Seq), sealed(idx, store.QueueKey(j.Queue, j.Seq), it.key)); err != nil {
					return false
				}
				rep.Jobs++
			case it.bucket == resultsID && len(it.val) >= 8:
				k := store.ResultExpKey(store.ResultExpiry(it.val), it.key)
				if err = tx.Bucket(store.BucketResultExp).Put(k, sealed(store.BucketResultExp, k, nil)); err != nil {
					return false
				}
			}
			rep.Values++
			err = tx.Bucket(name).Put(it.key, sealed(name, it.key, it.val))
			return err == nil
		})
		if err != nil {
			return err
		}
		meta := tx.Bucket(store.BucketMeta)
		if err := meta.Put(seqKey, sealed(store.BucketMeta, seqKey, binary.BigEndian.AppendUint64(nil, seq))); err != nil {
			return err
		}
		return meta.Put(checkpointKey, sealed(store.BucketMeta, checkpointKey, checkpointAt{}.encode()))
	})
	if err != nil {
		return rep, fmt.Errorf("salvage: writing %s: %w", to, err)
	}
	if encrypted { // encrypted values: a binary that knows none refuses the file
		if _, _, err := migrations.ApplyEncrypt(dst); err != nil {
			return rep, fmt.Errorf("salvage: %s: %w", to, err)
		}
	}
	return rep, nil
}

// rebuilt says whether Salvage makes bucket anew rather than copy it:
// the indexes (from the jobs), the results' expiry index (from the
// results), and meta (the schema from the migrations, the job sequence
// from the jobs).
func rebuilt(bucket []byte) bool {
	return store.IsIndex(bucket) || bytes.Equal(bucket, store.BucketResultExp) || bytes.Equal(bucket, store.BucketMeta)
}

// boltValues is every good value of the file bbolt reads, a bucket at a
// time, with the checkpoint and the job sequence; a bucket bbolt cannot
// walk to its end loses the rest of it, named.
func boltValues(src *bolt.DB, from string, rep *SalvageReport) (mem *tree, checkpoint checkpointAt, seq uint64) {
	if err := guarded(func() (err error) { checkpoint, seq, err = readCheckpoint(src, from); return err }); err != nil {
		rep.Lost = append(rep.Lost, err.Error())
	}
	mem = newTree()
	// A value whose seal fails may be whole, the header of its element
	// damaged (bbolt then reads it with the wrong sizes, or a wrong key):
	// its page is read again from its layout (salvage_leaf.go), which
	// names what it cannot read.
	bad := map[uint64][]byte{} // page -> its bucket
	for _, name := range buckets {
		if rebuilt(name) {
			continue
		}
		id, _ := bucketID(name)
		var last []byte
		err := guarded(func() error {
			return src.View(func(tx *bolt.Tx) error {
				bkt := tx.Bucket(name)
				if bkt == nil {
					return nil
				}
				return bkt.ForEach(func(k, v []byte) error {
					last = bytes.Clone(k)
					val, ok := unseal(name, k, v)
					if !ok && bytes.Equal(name, store.BucketDamaged) {
						val, ok = v, true // what a quarantine of old wrote without a seal
					}
					if !ok {
						// A bucket kept inline may be copied out of the
						// mapping: it is not read again.
						at, data := uintptr(unsafe.Pointer(unsafe.SliceData(k))), src.Info().Data
						if at < data || at >= data+uintptr(tx.Size()) {
							rep.Lost = append(rep.Lost, fmt.Sprintf("%s/%q: its checksum fails", name, k))
							return nil
						}
						bad[uint64((at-data)/uintptr(src.Info().PageSize))] = name
						return nil
					}
					mem.ReplaceOrInsert(&item{bucket: id, key: bytes.Clone(k), val: bytes.Clone(val)})
					return nil
				})
			})
		})
		if err != nil {
			rep.Lost = append(rep.Lost, fmt.Sprintf("bucket %s after key %q: %v", name, last, err))
		}
	}
	rep.Lost = append(rep.Lost, rereadPages(from, int64(src.Info().PageSize), bad, mem)...)
	// Of meta, which is made anew, the names of the keys its values are
	// encrypted with go too.
	_ = guarded(func() error {
		return src.View(func(tx *bolt.Tx) error {
			if mb := tx.Bucket(store.BucketMeta); mb != nil {
				if v := mb.Get(store.KeysKey); v != nil {
					val, ok := unseal(store.BucketMeta, store.KeysKey, v)
					if !ok {
						rep.Lost = append(rep.Lost, "meta/keys (the names of the keys the journal is encrypted with): its checksum fails")
						return nil
					}
					metaID, _ := bucketID(store.BucketMeta)
					mem.ReplaceOrInsert(&item{bucket: metaID, key: bytes.Clone(store.KeysKey), val: bytes.Clone(val)})
				}
			}
			return nil
		})
	})
	return mem, checkpoint, seq
}

// rereadPages reads the leaf pages bad (of the tree: live) from their
// layout, and adds to mem the values found there it does not hold. It
// returns what it could not read.
func rereadPages(path string, ps int64, bad map[uint64][]byte, mem *tree) (lost []string) {
	if len(bad) == 0 {
		return nil
	}
	f, err := os.Open(path)
	var fi os.FileInfo
	if err == nil {
		defer f.Close()
		fi, err = f.Stat()
	}
	if err != nil {
		for _, page := range slices.Sorted(maps.Keys(bad)) {
			lost = append(lost, fmt.Sprintf("bucket %s, page %d: values fail their checksums, and the page cannot be read again: %v", bad[page], page, err))
		}
		return lost
	}
	pf := &pageFile{f: f, size: fi.Size(), ps: ps}
	read := map[uint64]bool{}
	for _, page := range slices.Sorted(maps.Keys(bad)) {
		name := bad[page]
		if page = leafOf(pf, page); read[page] {
			continue // a key on a page after the leaf's first
		}
		read[page] = true
		b, err := pf.pages(page, 1)
		if err == nil && headOf(b).overflow > 0 {
			b, err = pf.pages(page, uint64(headOf(b).overflow)+1)
		}
		if err != nil {
			lost = append(lost, fmt.Sprintf("bucket %s, page %d: values fail their checksums, and the page cannot be read again: %v", name, page, err))
			continue
		}
		vals, unread := scanLeaf(b, keyRange{bucket: name})
		id, _ := bucketID(name)
		for _, v := range vals {
			if it := (&item{bucket: id, key: v.key, val: v.val}); !mem.Has(it) {
				mem.ReplaceOrInsert(it)
			}
		}
		for _, u := range unread {
			lost = append(lost, fmt.Sprintf("%s (page %d)", u, page))
		}
	}
	return lost
}

// leafOf is the first page of the leaf that takes page p: a key may lie
// on a page after the first, of a leaf of large values.
func leafOf(pf *pageFile, p uint64) uint64 {
	for q := p; q >= firstDataPage && p-q < maxGuess; q-- {
		if b, err := pf.pages(q, 1); err == nil {
			if h := headOf(b); h.id == q && h.flags == leafFlag && q+uint64(h.overflow) >= p {
				return q
			}
		}
	}
	return p
}

// pageValues is every live value of the file that reading it page by
// page finds whole (salvage_pages.go), with the checkpoint and the job
// sequence. Without a checkpoint, every record the log holds is
// replayed: records are whole values, replayed in order, so replaying
// ones the file already holds changes nothing.
func pageValues(from string, rep *SalvageReport) (mem *tree, checkpoint checkpointAt, seq uint64, err error) {
	ps, err := readPages(from)
	if err != nil {
		return nil, checkpoint, 0, fmt.Errorf("salvage: %w", err)
	}
	rep.Pages = append(rep.Pages, ps.notes...)
	rep.Lost = append(rep.Lost, ps.lost...)
	if ps.schema == nil {
		rep.Pages = append(rep.Pages, "the schema version cannot be read: the values are taken as of this binary's")
	} else if v, err := strconv.Atoi(string(bytes.TrimSpace(ps.schema))); err == nil && v < migrations.Latest() {
		return nil, checkpoint, 0, fmt.Errorf("%w: %s is at schema version %d, its values carry no checksums yet: run emq migrate up --data-dir (or start the broker on it) first",
			ErrOlder, from, v)
	}
	mem = newTree()
	var ckpt bool
	for _, v := range ps.vals {
		switch {
		case bytes.Equal(v.bucket, store.BucketMeta) && bytes.Equal(v.key, checkpointKey) && (len(v.val) == 8 || len(v.val) == 24):
			checkpoint.seq, ckpt = binary.BigEndian.Uint64(v.val), true
			if len(v.val) == 24 {
				checkpoint.end = wal.Position{Segment: binary.BigEndian.Uint64(v.val[8:]), Offset: int64(binary.BigEndian.Uint64(v.val[16:]))}
			}
		case bytes.Equal(v.bucket, store.BucketMeta) && bytes.Equal(v.key, seqKey) && len(v.val) == 8:
			seq = binary.BigEndian.Uint64(v.val)
		}
		if rebuilt(v.bucket) {
			continue
		}
		id, err := bucketID(v.bucket)
		if err != nil {
			continue
		}
		mem.ReplaceOrInsert(&item{bucket: id, key: v.key, val: v.val})
	}
	if !ckpt {
		if first := firstRecord(from); first > 0 {
			checkpoint = checkpointAt{seq: first - 1}
		}
		rep.Pages = append(rep.Pages, fmt.Sprintf("meta/checkpoint cannot be read: every record of the log is replayed, from %d", checkpoint.seq+1))
	}
	return mem, checkpoint, seq, nil
}

// firstRecord is the first record of the log of the journal at path (the
// name of its first segment), 0 if it has none.
func firstRecord(path string) uint64 {
	entries, _ := os.ReadDir(LogDir(path))
	var first uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".wal")
		if n, err := strconv.ParseUint(name, 10, 64); ok && err == nil && (first == 0 || n < first) {
			first = n
		}
	}
	return first
}

// CheckSealed opens the journal at path read-only with keys and opens
// every sealed value: rep's SealedBy and Unsealed (emq journal check
// --journal-keys). Keys the journal names and keys does not hold refuse
// the open, naming them.
func CheckSealed(path string, keys *store.Keyring, rep *CheckReport) error {
	opts := DefaultOptions()
	opts.ReadOnly, opts.LockTimeout, opts.Keys = true, 500*time.Millisecond, keys
	j, err := Open(path, opts)
	if err != nil {
		return err
	}
	defer j.Close()
	rep.SealedBy, rep.Unsealed, err = j.KeyCounts(true)
	return err
}
