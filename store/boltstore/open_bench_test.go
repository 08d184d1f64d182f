package boltstore_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// BenchmarkOpenWithLog: a journal of 1,000,000 stored jobs and 100,000
// more in its log, not yet checkpointed (what a SIGKILL leaves): Open
// and Load, as the broker does at start. Reports seconds per open.
func BenchmarkOpenWithLog(b *testing.B) {
	const inLog = 100_000
	path := bigJournal(b)
	opts := boltstore.DefaultOptions()
	opts.CheckpointEvery, opts.CheckpointBytes, opts.MaxLogBytes = time.Hour, 1<<30, 1<<31
	j, err := boltstore.Open(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	appendParallel(b, j, inLog, 64, v7, false)
	// What a kill leaves: the file as the last checkpoint wrote it, the
	// log as flushed.
	crashed := b.TempDir()
	copyJournal(b, path, crashed)
	j.Close()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		try := filepath.Join(b.TempDir(), "journal.db")
		copyJournal(b, filepath.Join(crashed, "journal.db"), filepath.Dir(try))
		b.StartTimer()
		start := time.Now()
		j, err := boltstore.Open(try, boltstore.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := j.Load(func(*store.Job) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/open")
		b.StopTimer()
		j.Close()
		if n != bigN+inLog {
			b.Fatalf("loaded %d jobs, want %d", n, bigN+inLog)
		}
		b.StartTimer()
	}
}

// copyJournal copies the journal file at path and its log into dir, as
// journal.db, synced.
func copyJournal(b *testing.B, path, dir string) {
	b.Helper()
	files := map[string]string{path: filepath.Join(dir, "journal.db")}
	segs, _ := filepath.Glob(filepath.Join(boltstore.LogDir(path), "*.wal"))
	if err := os.MkdirAll(boltstore.LogDir(filepath.Join(dir, "journal.db")), 0o750); err != nil {
		b.Fatal(err)
	}
	for _, s := range segs {
		files[s] = filepath.Join(boltstore.LogDir(filepath.Join(dir, "journal.db")), filepath.Base(s))
	}
	for from, to := range files {
		src, err := os.Open(from)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err == nil {
			_, err = io.Copy(dst, src)
			if serr := dst.Sync(); err == nil {
				err = serr
			}
			dst.Close()
		}
		src.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}
