package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
)

// bbolt's pages carry no checksum (its meta pages do), and on some
// damage it panics in a goroutine of its own, where no recover reaches:
// rebuilding an unsynced freelist at open walks every page that way. So
// the file's freelist is written at each commit (a checkpoint a second
// or so: a page or two), and bbolt opens it without that walk. A file
// whose freelist was not written (one from before, or bbolt's
// NoFreelistSync) is first walked here, where a panic is caught. Once
// open, bbolt's own check (tx.Check, whose panics it catches) runs in the
// background, and nothing is written into the file until it has passed:
// a damaged freelist would hand out pages in use. Meanwhile, and if it
// fails, the log holds every commit, up to MaxLogBytes.

// freelistSynced reads which of the file's two meta pages is current
// (valid, the higher transaction) and whether it names a freelist page.
// It answers true when it cannot tell: bbolt then says what is wrong.
func freelistSynced(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	var best struct {
		txid     uint64
		freelist uint64
		ok       bool
	}
	pageSize := int64(os.Getpagesize()) // where the second meta is when the first cannot say
	for i := range int64(2) {
		buf := make([]byte, 16+64) // a page's header, then the meta
		off := int64(0)
		if i == 1 {
			off = pageSize
		}
		if _, err := f.ReadAt(buf, off); err != nil {
			continue
		}
		m := buf[16:]
		h := fnv.New64a()
		h.Write(m[:56])
		if binary.LittleEndian.Uint32(m[0:]) != boltMagic || h.Sum64() != binary.LittleEndian.Uint64(m[56:]) {
			continue
		}
		if i == 0 {
			pageSize = int64(binary.LittleEndian.Uint32(m[8:]))
		}
		if txid := binary.LittleEndian.Uint64(m[48:]); !best.ok || txid > best.txid {
			best.txid, best.freelist, best.ok = txid, binary.LittleEndian.Uint64(m[32:]), true
		}
	}
	return !best.ok || best.freelist != noFreelist
}

// The meta page's layout, from bbolt's file format: magic, version, page
// size, flags (u32 each), the root bucket (pgid, sequence), the freelist
// pgid, the high-water pgid, the txid and an FNV-64a of what precedes it.
const (
	boltMagic  = 0xED0CDAED
	noFreelist = ^uint64(0)
)

// walk reads every key and value of every bucket, nested ones too, in
// db (open read-only): every page bbolt would walk to rebuild its
// freelist. A panic of bbolt's is an error.
func walk(db *bolt.DB) error {
	return guarded(func() error {
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walkBucket(b) })
		})
	})
}

func walkBucket(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if nested := b.Bucket(k); nested != nil {
				return walkBucket(nested)
			}
		}
		return nil
	})
}

// walkFirst walks a file whose freelist was not written before bbolt
// opens it for writing (and rebuilds its freelist, in a goroutine that
// would take the process down with it).
func walkFirst(path string, opts Options) error {
	if freelistSynced(path) {
		return nil
	}
	ro := opts
	ro.ReadOnly = true
	db, err := openBolt(path, ro)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := walk(db); err != nil {
		return fmt.Errorf("%w: %s: %v; the file was left as it is: emq journal check --data-dir says what is wrong, emq journal salvage keeps what is good", store.ErrCorrupt, path, err)
	}
	return nil
}

// checkStructure runs bbolt's check of the open file and closes
// j.checked; j.structure holds what it found.
func (j *Journal) checkStructure() {
	defer close(j.checked)
	j.dbmu.RLock() // a compaction swaps the file after it
	// It reads every page: they go back to the kernel as it goes.
	stop := dropWhile(func() { dropDB(j.db) })
	problems := structure(j.db)
	stop()
	j.dbmu.RUnlock()
	if len(problems) == 0 {
		return
	}
	j.structure = fmt.Errorf("%w: journal %s: bbolt's check of the file found it damaged (%s): nothing more is written into it, the log keeps every commit up to its limit; stop the broker and run emq journal check --data-dir",
		store.ErrCorrupt, j.path, strings.Join(problems[:min(3, len(problems))], "; "))
	j.opts.Logger.Error("journal: the file is damaged; checkpoints stopped", "journal", j.path, "err", j.structure)
	if j.opts.OnDamage != nil {
		j.opts.OnDamage(store.Damage{Reason: j.structure.Error()})
	}
}

// structureChecked waits for the check of the file's structure and
// says what it found; errStopping if the journal closes first (Close
// itself waits for the check before its last checkpoint).
func (j *Journal) structureChecked() error {
	select {
	case <-j.checked:
		return j.structure
	case <-j.ckptStop:
		select {
		case <-j.checked:
			return j.structure
		default:
			return errStopping
		}
	}
}

var errStopping = errors.New("the journal is closing")
