// Package boltstore is the journal on one machine, the default: a
// write-ahead log (package wal) in front of a bbolt file. A commit is one
// log record and one fdatasync; bbolt, the journal of record, keyed by
// msgid, is brought up to date behind the ACKs (checkpoint.go), and a job
// completed before its checkpoint never reaches it. Every byte carries a
// checksum that is checked when read: the log's records (CRC-32C) and
// bbolt's values (kv.go). store/doc.go says what an ACK promises.
//
//	commit ─▶ log record, fdatasync ─▶ memtable ─checkpoint─▶ bbolt
//	                                     ▲                      ▲
//	reads ───────────────────────────────┴──────────────────────┘
package boltstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/wal"
)

// Options configure a journal on one machine.
type Options struct {
	// LockTimeout is how long Open waits for another process to let go of
	// the file before it fails with store.ErrLocked.
	LockTimeout time.Duration
	// MaxBatch is the most writes one commit takes.
	MaxBatch int
	// MaxJobSize bounds a job's stored size (payload, headers, ids and
	// error text); a larger Append fails with ErrTooLarge and nothing
	// else is touched. At most 1 GiB (bbolt's value limit is 2 GiB).
	MaxJobSize int
	// ReadOnly opens the journal without the write lock and without
	// migrating, for looking at it while another process may hold it: the
	// log is read, not changed. Writes fail with ErrReadOnly.
	ReadOnly bool
	// OnCommit, if set, is called after each commit with the number of
	// writes it held and how long it took (for metrics).
	OnCommit func(writes int, took time.Duration)
	// OnCheckpoint, if set, is called after each checkpoint with the keys
	// it wrote into bbolt and how long it took.
	OnCheckpoint func(keys int, took time.Duration)
	// OnDamage, if set, is told of each value found failing its checksum,
	// as it is moved aside (store/quarantine.go), and of damage to the
	// file's structure (a Damage without a bucket; also logged).
	OnDamage func(store.Damage)
	// LazyDelay is how long Completes, when nothing else is queued, wait
	// for a write that cannot wait (an Append) to share its commit (1 ms).
	// With the log a commit of Completes alone is not flushed (the next
	// one that is flushes it), but it is still a commit: a write, the
	// committer woken. At 1:1 the next job's Append comes about a round
	// trip after the last one's REPLY: waiting for it made 1.87 commits
	// a job one (emq bench --senders 1 --slots 1 --ack-only), and took 5
	// % off the CPU a job. What waits is a job done whose delete is not
	// yet written: a crash meanwhile runs it again, as one before the
	// unflushed delete reached the disk would.
	LazyDelay time.Duration

	// SegmentSize is the size of the log's segment files (64 MiB).
	SegmentSize int64
	// CheckpointBytes starts a checkpoint when the log's records not yet
	// in bbolt (or the memtable) reach it, and is how many bytes of
	// values one bbolt transaction of a checkpoint takes; CheckpointEvery
	// starts one this often while the memtable holds anything.
	CheckpointBytes int64
	CheckpointEvery time.Duration
	// MaxLogBytes bounds what the log holds that bbolt does not yet (its
	// bytes, and the memtable's): past it, writes that must be durable
	// fail (ErrLogFull) until a checkpoint catches up. It bounds disk and
	// the checkpoint's lag; the memtable holds a value of 1 KiB or more as
	// its place in the log (and a job's head), so its memory does not
	// grow with payloads.
	MaxLogBytes int64
	// DirectBytes: a commit whose log record would be larger goes into
	// bbolt directly, with what the memtable holds (two fdatasyncs, no
	// copy in memory): large jobs.
	DirectBytes int64
	// Recover opens a log damaged in the middle: every good record is
	// replayed, the damaged stretches are logged and reported
	// (Recovered), and the journal is checkpointed and its log started
	// anew. Without it such a log refuses to open (wal.ErrDamaged).
	Recover bool
	// Logger gets a line for a torn tail cut at open, for what Recover
	// skipped, and for failed checkpoints (nil = slog.Default()).
	Logger *slog.Logger
	// Keys, if set, encrypt payloads, headers, errors, results and
	// schedules at rest (store/encrypt.go); the file is then at schema
	// migrations.Encrypt, which older binaries refuse. A journal that
	// names keys (meta/keys) opens only with them (store.ErrKeys).
	Keys *store.Keyring
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{LockTimeout: time.Second, MaxBatch: 8192, MaxJobSize: 256 << 20,
		SegmentSize: wal.DefaultSegmentSize, CheckpointBytes: 16 << 20, CheckpointEvery: time.Second,
		MaxLogBytes: 512 << 20, DirectBytes: 4 << 20, LazyDelay: time.Millisecond}
}

// Validate reports the first bad option.
func (o Options) Validate() error {
	switch {
	case o.LockTimeout <= 0:
		return fmt.Errorf("store: LockTimeout must be > 0, got %v", o.LockTimeout)
	case o.MaxJobSize <= 0 || o.MaxJobSize > 1<<30:
		return fmt.Errorf("store: MaxJobSize must be 1 byte to 1 GiB, got %d", o.MaxJobSize)
	case o.MaxBatch <= 0:
		return fmt.Errorf("store: MaxBatch must be > 0, got %d", o.MaxBatch)
	case o.LazyDelay < 0 || o.LazyDelay > time.Second:
		return fmt.Errorf("store: LazyDelay must be 0 to 1s, got %v", o.LazyDelay)
	case o.SegmentSize < 1<<20 || o.SegmentSize%8 != 0:
		return fmt.Errorf("journal-segment-size: %d: want at least 1 MiB, a multiple of 8", o.SegmentSize)
	case o.CheckpointBytes < 64<<10 || o.CheckpointEvery <= 0:
		return fmt.Errorf("store: CheckpointBytes must be at least 64 KiB and CheckpointEvery positive")
	case o.MaxLogBytes < o.CheckpointBytes:
		return fmt.Errorf("journal-max-log: %d is under the checkpoint size %d", o.MaxLogBytes, o.CheckpointBytes)
	case o.DirectBytes < 64<<10 || o.DirectBytes > o.SegmentSize/2:
		return fmt.Errorf("store: DirectBytes must be 64 KiB to half a segment, got %d", o.DirectBytes)
	}
	return nil
}

// Journal is the store.Journal on one machine: the log, the memtable,
// the bbolt file. The committer is store.Core's.
type Journal struct {
	*store.Core
	path string
	opts Options
	log  *wal.Log

	dbmu    sync.RWMutex // held for reading by every use of db; for writing by a compaction's swap
	db      *bolt.DB
	dropped time.Time // the committer's last dropMapping

	// The memtable (memtable.go). The committer changes active and the
	// counters; mu orders that with readers taking a clone, and with the
	// checkpointer dropping frozen.
	mu         sync.Mutex
	active     *tree
	frozen     *tree          // being checkpointed; nil when none is
	frozenUpto checkpointAt   // the last log record in frozen, and where it ends
	snap       *tree          // a clone of active for views; nil: make one
	memBytes   int64          // of active and frozen
	activeLog  int64          // the log's bytes of the records in active
	frozenLog  int64          // and of those in frozen
	pins       map[uint64]int // views reading the log from each record on (pin)
	truncTo    uint64         // the log may lose its records up to this one, once no view pins them
	betweenTxs func()         // a test's hook: after each transaction of a checkpoint but the last
	txBytes    int64          // of values in one bbolt transaction of a checkpoint: CheckpointBytes
	seq        uint64         // the job sequence (NextSeq)
	applied    uint64         // the last log record in the memtable
	ckptErr    error          // the last checkpoint's failure

	checkpointed atomic.Uint64 // the last log record in bbolt
	ckptMu       sync.Mutex    // one bbolt write at a time: a checkpoint, a direct commit, a compaction
	ckptWake     chan struct{}
	ckptStop     chan struct{}
	ckptDone     chan struct{}
	checked      chan struct{} // closed when bbolt's check of the file is done
	structure    error         // what it found; nothing is written into a damaged file

	recovered []wal.Cut // what Recover skipped
}

var (
	_ store.Journal     = (*Journal)(nil)
	_ store.Compactor   = (*Journal)(nil)
	_ store.Quarantined = (*Journal)(nil)
)

// LogDir is the folder of the log of the journal file at path.
func LogDir(path string) string { return path + ".log" }

// Open opens (or creates) the journal file at path and its log, creating
// its folder, applying migrations and replaying what the log holds after
// the file's checkpoint. It never rewrites a file it cannot read. A torn
// tail of the log (a write the machine did not finish, never ACKed) is
// cut and logged; damage anywhere else refuses to open, naming the
// segment and offset, unless Options.Recover.
func Open(path string, opts Options) (*Journal, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("journal %s: cannot create its folder: %w", path, err)
		}
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	err = guarded(func() error {
		var err error
		if opts.ReadOnly {
			var v int
			if v, _, err = migrations.Check(db); err == nil && v < migrations.Latest() {
				err = fmt.Errorf("%w: the file is at schema version %d, and this binary reads %d: its values carry no checksums yet; start the broker on it, or run emq migrate up --data-dir, to upgrade it first",
					ErrOlder, v, migrations.Latest())
			}
		} else if err = safeToMigrate(db); err == nil && opts.Keys != nil {
			_, _, err = migrations.ApplyEncrypt(db) // before any value is encrypted
		} else if err == nil {
			_, _, err = migrations.Apply(db)
		}
		return err
	})
	if errors.Is(err, errPanicked) {
		db.Close()
		return nil, corrupt(path, err)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	j := &Journal{path: path, db: db, opts: opts, active: newTree(), txBytes: opts.CheckpointBytes,
		ckptWake: make(chan struct{}, 1), ckptStop: make(chan struct{}), ckptDone: make(chan struct{}), checked: make(chan struct{})}
	var at checkpointAt
	var seq uint64
	err = guarded(func() (err error) { at, seq, err = readCheckpoint(db, path); return err })
	if err != nil {
		db.Close()
		return nil, corrupt(path, err)
	}
	j.seq, j.applied = seq, at.seq
	j.checkpointed.Store(at.seq)
	log, rep, err := wal.OpenRecords(LogDir(path), wal.Options{SegmentSize: opts.SegmentSize, ReadOnly: opts.ReadOnly, Recover: opts.Recover, Checkpointed: at.end},
		at.seq, j.replay)
	if err != nil {
		db.Close()
		if errors.Is(err, wal.ErrDamaged) {
			return nil, fmt.Errorf("%w: journal %s: %w", store.ErrCorrupt, path, err)
		}
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	j.log = log
	if !opts.ReadOnly {
		// Segments a crash left between a checkpoint and their deletion.
		if err := log.TruncateFront(at.seq); err != nil {
			log.Close()
			db.Close()
			return nil, fmt.Errorf("journal %s: %w", path, err)
		}
	}
	if rep.Torn != nil {
		opts.Logger.Warn("journal: the log's last write was torn (the machine stopped during it; it was never acknowledged): cut off",
			"journal", path, "segment", rep.Torn.File, "offset", rep.Torn.Offset, "bytes", rep.Torn.Bytes)
	}
	for _, c := range rep.Passed {
		opts.Logger.Warn("journal: damaged bytes in the log where it holds only checkpointed records: nothing is lost, but the disk changed what was written (emq journal check)",
			"journal", path, "segment", c.File, "offset", c.Offset, "bytes", c.Bytes, "why", c.Reason)
	}
	for _, c := range rep.Lost {
		opts.Logger.Error("journal: a damaged stretch of the log was skipped (--journal-recover): what it held is lost",
			"journal", path, "segment", c.File, "offset", c.Offset, "bytes", c.Bytes, "why", c.Reason)
	}
	j.recovered = rep.Lost
	// Opening may have read every page of the file (a file without its
	// freelist is walked first, structure.go): none is needed in memory.
	j.drop()
	if err := store.CheckKeys(logKV{j}, path, opts.Keys); err != nil {
		log.Close()
		db.Close()
		return nil, err
	}
	j.Core = store.StartCore(path, logKV{j}, store.CoreOptions{MaxBatch: opts.MaxBatch, MaxJobSize: opts.MaxJobSize,
		ReadOnly: opts.ReadOnly, OnCommit: opts.OnCommit, LazyDelay: opts.LazyDelay, OnDamage: opts.OnDamage,
		AfterCommit: j.dropAfterCommit, Keys: opts.Keys})
	if opts.ReadOnly {
		close(j.ckptDone)
		return j, nil
	}
	if err := j.Resume(); err != nil {
		j.Close()
		return nil, err
	}
	go j.checkStructure()
	if len(rep.Lost) > 0 {
		// What was kept goes into the file, and the damaged log away: the
		// next open does not meet the damage again.
		if err := j.structureChecked(); err != nil {
			j.Close()
			return nil, err
		}
		if err := j.rebase(); err != nil {
			j.Close()
			return nil, err
		}
	}
	go j.checkpointer()
	if err := j.NoteKeys(); err != nil {
		j.Close()
		return nil, err
	}
	if err := j.ResumeRekey(); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// Recovered lists what Options.Recover skipped at open.
func (j *Journal) Recovered() []wal.Cut { return j.recovered }

// rebase writes the whole memtable into bbolt and starts a new log after
// it, the old one deleted.
func (j *Journal) rebase() error {
	j.freeze()
	if err := j.checkpoint(); err != nil {
		return err
	}
	j.freeze()
	if err := j.checkpoint(); err != nil {
		return err
	}
	if err := j.log.Close(); err != nil {
		return err
	}
	if err := os.RemoveAll(LogDir(j.path)); err != nil {
		return fmt.Errorf("journal %s: removing its damaged log: %w", j.path, err)
	}
	log, _, err := wal.Open(LogDir(j.path), wal.Options{SegmentSize: j.opts.SegmentSize}, j.applied, func(uint64, []byte) error { return nil })
	if err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	j.log = log
	// The position bbolt holds is of the log just removed.
	return j.writeBolt(checkpointAt{j.applied, log.End()}, nil)
}

func openBolt(path string, opts Options) (db *bolt.DB, err error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("journal %s is a folder, not a file", path)
	}
	if !opts.ReadOnly {
		if _, err := os.Stat(path); err == nil {
			if err := walkFirst(path, opts); err != nil {
				return nil, err
			}
		}
	}
	defer func() { // bbolt panics on some damage (its freelist, a page that is not what it says)
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %s: bbolt failed opening it (%v); the file was left as it is: emq journal check --data-dir says what is wrong, emq journal salvage keeps what is good", store.ErrCorrupt, path, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opts.LockTimeout,
		ReadOnly:     opts.ReadOnly,
		FreelistType: bolt.FreelistMapType,
		// The freelist is written at each commit (a checkpoint): bbolt
		// rebuilding it at open could panic where nothing recovers
		// (structure.go).
		NoFreelistSync: false,
		// Address space, not memory: a file growing to this size is never
		// remapped, and a remap makes bbolt copy every node it holds
		// (its checkpoints took a fifth of the CPU for it, measured).
		InitialMmapSize: initialMmap,
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another process (a running broker? use its admin API, or stop it)", store.ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: %s: %v (the file was left as it is; emq journal check --data-dir says more)", store.ErrCorrupt, path, err)
	}
	return nil, fmt.Errorf("journal %s: %w", path, err)
}

// initialMmap is the mapping bbolt starts with (1 GiB; on a 32-bit
// machine, bbolt's own default).
const initialMmap = int(1 << 30 * (^uint(0) >> 63))

// Path returns the journal file's path.
func (j *Journal) Path() string { return j.path }

// String names the journal in logs.
func (j *Journal) String() string { return "bbolt " + j.path + " with its log" }

// A commit storing dropAfter bytes is followed by dropMapping, and any
// commit dropEvery after the last one: the committer's reads of the file
// do not pile up in memory, for a few system calls a second.
const (
	dropAfter = 8 << 20
	dropEvery = 250 * time.Millisecond
)

// dropAfterCommit is the core's AfterCommit.
func (j *Journal) dropAfterCommit(size int) {
	if size >= dropAfter || time.Since(j.dropped) >= dropEvery {
		j.drop()
		j.dropped = time.Now()
	}
}

// drop releases the file's mapping from the process's memory.
func (j *Journal) drop() {
	j.dbmu.RLock()
	defer j.dbmu.RUnlock()
	dropDB(j.db)
}

// dropWhile calls drop every dropTick until stop is called, for work
// that reads much of the file at once (bbolt's check at open, a load, a
// checkpoint rewriting its leaves). Dropping what each read used is not
// enough: the kernel maps a whole large folio of the page cache (1 MiB
// and more on ext4) at each fault, so the next read beside a dropped
// value maps most of it again, and a walk of the file would map it all.
func dropWhile(drop func()) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(dropTick)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				drop()
			}
		}
	}()
	return func() { close(done); <-ended; drop() }
}

// dropTick bounds what a walk of the file keeps mapped to what it reads
// in 10 ms: tens of MiB, for a system call or two per tick.
const dropTick = 10 * time.Millisecond

// dropDB is drop for a caller that holds dbmu, and so keeps db in place.
func dropDB(db *bolt.DB) {
	_ = db.View(func(tx *bolt.Tx) error { dropMapping(tx); return nil })
}

// dropMapping releases the pages of the file's mapping from the
// process's memory (pages_linux.go); tx keeps the mapping in place.
func dropMapping(tx *bolt.Tx) {
	data := tx.DB().Info().Data
	dropRange(data, data+uintptr(tx.Size()))
}

// Close finishes the queued writes, checkpoints what the log holds into
// the file, and closes both. Writes made after Close fail with
// ErrClosed.
func (j *Journal) Close() error {
	if j.Stop() {
		return nil
	}
	close(j.ckptStop)
	<-j.ckptDone
	var err error
	if !j.opts.ReadOnly {
		<-j.checked // the file is not closed under it, and its word is had
	}
	if !j.opts.ReadOnly && j.log.Failed() == nil {
		// The committer has stopped: its memtable is this goroutine's.
		// Written into the file, the next open has nothing to replay;
		// if that fails (the disk full), the log keeps it all.
		j.freeze()
		cerr := j.checkpoint()
		if cerr == nil {
			j.freeze()
			cerr = j.checkpoint()
		}
		if cerr != nil {
			j.opts.Logger.Warn("journal: the last checkpoint at close failed; the log keeps what it holds, and the next open replays it",
				"journal", j.path, "err", cerr)
		}
	}
	if j.log != nil {
		err = j.log.Close()
	}
	j.dbmu.Lock()
	defer j.dbmu.Unlock()
	if cerr := j.db.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("journal %s: close: %w", j.path, cerr)
	}
	return err
}

// Load implements Journal, giving the pages it reads back to the kernel
// as it goes.
func (j *Journal) Load(fn func(*store.Job) error) error {
	defer dropWhile(j.drop)()
	return j.Core.Load(fn)
}

// appendFill is how full bbolt packs pages split by appends. Index keys
// (queue + sequence) and time-ordered msgids land at the tail, where
// bbolt's default of half-full pages would leave half of every page
// empty for ever; random v4 msgids cost a little more splitting.
const appendFill = 0.95

// Migrations reports the file's schema version and each known step.
func (j *Journal) Migrations() (int, []migrations.Status, error) {
	return migrations.Check(j.db)
}

// ErrOlder refuses to read, without upgrading it, a file of an older
// schema (ReadOnly, Check, Salvage).
var ErrOlder = errors.New("the journal is older than this binary")

// Migrations reports the schema version of the journal file at path and
// each known step, reading nothing else (a file of any version).
func Migrations(path string) (int, []migrations.Status, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, nil, fmt.Errorf("journal %s: %w", path, err)
	}
	opts := DefaultOptions()
	opts.ReadOnly = true
	db, err := openBolt(path, opts)
	if err != nil {
		return 0, nil, err
	}
	defer db.Close()
	var v int
	var st []migrations.Status
	err = guarded(func() (err error) { v, st, err = migrations.Check(db); return err })
	return v, st, corrupt(path, err)
}

// Migrate brings the journal file at path up to the latest schema and
// returns the versions it moved between. Open does the same; this says so.
func Migrate(path string, opts Options) (from, to int, err error) {
	if err := opts.Validate(); err != nil {
		return 0, 0, err
	}
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("journal %s: %w", path, err)
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	from, to, err = migrations.Apply(db)
	if err != nil {
		return from, to, fmt.Errorf("journal %s: %w", path, err)
	}
	return from, to, nil
}
