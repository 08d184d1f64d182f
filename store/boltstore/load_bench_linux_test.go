package boltstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/store/storetest"
)

// BenchmarkLoadLargeJobs: the broker's start on a backlog of 512 jobs of
// 1 MiB, from a cold page cache for the file (its pages dropped first),
// in clear and encrypted at rest. Load reads each job's head, not its
// payload, in both. Reports seconds per open and load.
func BenchmarkLoadLargeJobs(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "clear"
		var keys *store.Keyring
		if keyed {
			name, keys = "keys", storetest.Keys(b, "k1")
		}
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "journal.db")
			opts := boltstore.DefaultOptions()
			opts.Keys = keys
			j, err := boltstore.Open(path, opts)
			if err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1<<20)
			const n = 512
			for i := range n {
				payload[0] = byte(i)
				if _, err := store.Wait(func(done func(bool, error)) {
					j.Append(&store.Job{MsgID: fmt.Sprintf("m%04d", i), Queue: "q", Payload: payload}, done)
				}); err != nil {
					b.Fatal(err)
				}
			}
			j.Close()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				dropCache(b, path)
				b.StartTimer()
				timeLoad(b, path, opts, n)
			}
		})
	}
}

// dropCache drops the page cache of the file at path (its pages are
// read from the disk again).
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const fadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); e != 0 {
		b.Fatal(e)
	}
}

// BenchmarkLoadSmallJobs: the broker's start on 200,000 jobs of 200
// bytes (page cache warm), in clear and encrypted at rest: each job's
// head is decrypted. Reports seconds per open and load.
func BenchmarkLoadSmallJobs(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "clear"
		var keys *store.Keyring
		if keyed {
			name, keys = "keys", storetest.Keys(b, "k1")
		}
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "journal.db")
			opts := boltstore.DefaultOptions()
			opts.Keys = keys
			j, err := boltstore.Open(path, opts)
			if err != nil {
				b.Fatal(err)
			}
			const n = 200_000
			errs := make(chan error, n)
			for i := range n {
				j.Append(&store.Job{MsgID: fmt.Sprintf("m%07d", i), Queue: "q", Headers: "h:1", Payload: make([]byte, 200)},
					func(_ bool, err error) { errs <- err })
			}
			for range n {
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
			}
			j.Close()
			b.ResetTimer()
			for range b.N {
				timeLoad(b, path, opts, n)
			}
		})
	}
}

// timeLoad opens the journal at path and loads its n jobs, reporting the
// time as s/load; the close and the count's check are not timed.
func timeLoad(b *testing.B, path string, opts boltstore.Options, n int) {
	b.Helper()
	start := time.Now()
	j, err := boltstore.Open(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	got := 0
	if err := j.Load(func(*store.Job) error { got++; return nil }); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "s/load")
	b.StopTimer()
	j.Close()
	if got != n {
		b.Fatalf("loaded %d of %d", got, n)
	}
	b.StartTimer()
}
