package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/eventmq/emq/store"
)

// Compact implements store.Compactor. It runs on the committer between two
// batches, so no write is lost or reordered; writes and reads wait while
// it copies. The copy is made beside the file, synced, and renamed over
// it, so a crash at any moment leaves either the old file or the new one.
func (b *Journal) Compact() (store.CompactStats, error) {
	if b.opts.ReadOnly {
		return store.CompactStats{}, fmt.Errorf("%w: %s", store.ErrReadOnly, b.path)
	}
	type outcome struct {
		st  store.CompactStats
		err error
	}
	ch := make(chan outcome, 1)
	b.Alone(func() {
		st, err := b.compact()
		ch <- outcome{st, err}
	}, func(err error) {
		if err != nil {
			ch <- outcome{err: err}
		}
	})
	o := <-ch
	return o.st, o.err
}

func (b *Journal) compact() (st store.CompactStats, err error) {
	b.dbmu.Lock()
	defer b.dbmu.Unlock()
	if fi, err := os.Stat(b.path); err == nil {
		st.Before = fi.Size()
	}
	tmp := b.path + ".compact"
	_ = os.Remove(tmp)
	dst, err := openBolt(tmp, b.opts)
	if err != nil {
		return st, err
	}
	if err := bolt.Compact(dst, b.db, 64<<20); err != nil {
		dst.Close()
		os.Remove(tmp)
		return st, fmt.Errorf("journal %s: compact: %w", b.path, err)
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return st, fmt.Errorf("journal %s: compact: %w", b.path, err)
	}
	if err := b.db.Close(); err != nil {
		os.Remove(tmp)
		return st, fmt.Errorf("journal %s: compact: closing the old file: %w", b.path, err)
	}
	renameErr := os.Rename(tmp, b.path)
	if renameErr == nil {
		renameErr = syncDir(filepath.Dir(b.path))
	}
	db, openErr := openBolt(b.path, b.opts)
	if openErr != nil {
		// Nothing to serve from: later writes fail with this error.
		return st, fmt.Errorf("journal %s: compact: reopening: %w", b.path, errors.Join(renameErr, openErr))
	}
	b.db = db
	if renameErr != nil {
		os.Remove(tmp)
		return st, fmt.Errorf("journal %s: compact: the copy could not replace the file (the old file is kept): %w", b.path, renameErr)
	}
	if fi, err := os.Stat(b.path); err == nil {
		st.After = fi.Size()
	}
	return st, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
