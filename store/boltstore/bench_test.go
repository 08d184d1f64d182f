package boltstore_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/eventmq/emq/internal/etcdtest"
)

var payload200 = bytes.Repeat([]byte("p"), 200)

func v7() string { return uuid.Must(uuid.NewV7()).String() }
func v4() string { return uuid.New().String() }

// appendParallel appends n jobs from workers goroutines, each waiting for
// its append to be durable before the next, as the broker's clients do.
// With remove, each job is completed right after (the life of a job).
func appendParallel(b *testing.B, j store.Journal, n, workers int, newID func() string, remove bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				id := newID()
				_, err := store.Wait(func(done func(bool, error)) {
					j.Append(&store.Job{MsgID: id, Queue: "q", Payload: payload200}, done)
				})
				if err == nil && remove {
					_, err = store.Wait(func(done func(bool, error)) { j.Complete(id, nil, time.Time{}, nil, done) })
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func benchAppend(b *testing.B, j store.Journal, newID func() string, remove bool) {
	b.ResetTimer()
	start := time.Now()
	appendParallel(b, j, b.N, 64, newID, remove)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkAppend: 200-byte jobs from 64 concurrent appenders into a
// growing file, fsync on.
func BenchmarkAppend(b *testing.B) {
	b.Run("v7", func(b *testing.B) { j, _ := tempJournal(b); benchAppend(b, j, v7, false) })
	b.Run("v4", func(b *testing.B) { j, _ := tempJournal(b); benchAppend(b, j, v4, false) })
}

// BenchmarkAppendBulk1000: bulks of 1,000 jobs of 100 bytes, one after
// another from one sender, each durable (fsync on) before the next, into
// a growing file: what one client's BULK costs the journal.
func BenchmarkAppendBulk1000(b *testing.B) {
	j, _ := tempJournal(b)
	payload := bytes.Repeat([]byte("p"), 100)
	jobs := make([]*store.Job, 1000)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		for i := range jobs {
			jobs[i] = &store.Job{MsgID: v7(), Queue: "q", Payload: payload}
		}
		dups, err := store.Wait(func(done func([]bool, error)) { j.AppendBulk(jobs, done) })
		if err != nil || slices.Contains(dups, true) {
			b.Fatalf("bulk: %v", err)
		}
	}
	b.ReportMetric(float64(b.N*len(jobs))/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkAppendRemove: append, then complete, each durable: the life of
// a job in the journal.
func BenchmarkAppendRemove(b *testing.B) {
	b.Run("v7", func(b *testing.B) { j, _ := tempJournal(b); benchAppend(b, j, v7, true) })
	b.Run("v4", func(b *testing.B) { j, _ := tempJournal(b); benchAppend(b, j, v4, true) })
}

// BenchmarkAppendPipelined: 64 appenders that each keep up to 16 appends
// in flight, as clients that pipeline requests do (the broker's socket
// loop never waits for the journal). With complete, each durable append
// is followed by a complete that is not waited for, as the broker does on
// a REPLY.
func BenchmarkAppendPipelined(b *testing.B) {
	for _, complete := range []bool{false, true} {
		name := "append"
		if complete {
			name = "append+complete"
		}
		b.Run(name, func(b *testing.B) {
			j, _ := tempJournal(b)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range 64 {
				wg.Go(func() {
					window := make(chan struct{}, 16)
					var mine sync.WaitGroup
					for next.Add(1) <= int64(b.N) {
						window <- struct{}{}
						mine.Add(1)
						id := v7()
						j.Append(&store.Job{MsgID: id, Queue: "q", Payload: payload200}, func(_ bool, err error) {
							if err != nil {
								b.Error(err)
							}
							if complete {
								j.Complete(id, nil, time.Time{}, nil, nil)
							}
							<-window
							mine.Done()
						})
					}
					mine.Wait()
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

// BenchmarkAppendPaced: appends at a fixed 5,000/s, each completed once
// durable, as the broker's paced bench drives the journal; reports the
// append→durable latency, the journal's share of REQUEST→ACK.
func BenchmarkAppendPaced(b *testing.B) {
	const rate = 5000
	j, _ := tempJournal(b)
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	wg.Add(b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
		id, t := v7(), time.Now()
		j.Append(&store.Job{MsgID: id, Queue: "q", Payload: payload200[:100]}, func(_ bool, err error) {
			lat[i] = time.Since(t)
			if err != nil {
				b.Error(err)
			}
			j.Complete(id, nil, time.Time{}, nil, nil)
			wg.Done()
		})
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p99.9-ms")
}

// preload fills a journal with n jobs as fast as it can (async appends),
// and closes it.
func preload(b *testing.B, path string, n int, newID func() string) {
	j, err := boltstore.Open(path, boltstore.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		j.Append(&store.Job{MsgID: newID(), Queue: "q", Payload: payload200}, func(_ bool, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

var (
	bigOnce sync.Once
	bigDir  string
)

const bigN = 1000000

// bigJournal is a journal file of 1,000,000 stored 200-byte jobs, made
// once per run; each caller gets its own copy.
func bigJournal(b *testing.B) string {
	bigOnce.Do(func() {
		dir, err := os.MkdirTemp("", "emq-bench-")
		if err != nil {
			b.Fatal(err)
		}
		bigDir = dir
		start := time.Now()
		preload(b, filepath.Join(dir, "big.db"), bigN, v7)
		b.Logf("preloaded %d jobs in %v", bigN, time.Since(start))
	})
	path := filepath.Join(b.TempDir(), "journal.db")
	// Streamed (not read whole: that would count in the memory figure),
	// and synced before the timer starts: otherwise the first commit's
	// fsync would flush the whole copy.
	src, err := os.Open(filepath.Join(bigDir, "big.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = io.Copy(dst, src)
		err = errors.Join(err, dst.Sync(), dst.Close())
	}
	if err != nil {
		b.Fatal(err)
	}
	return path
}

// rssMiB reads one memory line of /proc/self/status ("VmRSS:" is all
// resident memory, with the journal's mapped pages; "RssAnon:" the heap
// and stacks only).
func rssMiB(field string) float64 {
	data, _ := os.ReadFile("/proc/self/status")
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

// BenchmarkLoad1M: open a journal of 1,000,000 jobs and stream them all,
// as the broker does at start-up. Reports seconds per load and the
// process's resident memory after it.
func BenchmarkLoad1M(b *testing.B) {
	path := bigJournal(b)
	runtime.GC()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		j, err := boltstore.Open(path, boltstore.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := j.Load(func(*store.Job) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/load")
		b.ReportMetric(rssMiB("VmRSS:"), "MiB-rss")
		b.ReportMetric(rssMiB("RssAnon:"), "MiB-anon")
		if fi, err := os.Stat(path); err == nil {
			b.ReportMetric(float64(fi.Size())/(1<<20), "MiB-file")
		}
		j.Close()
		if n != bigN {
			b.Fatalf("loaded %d jobs, want %d", n, bigN)
		}
	}
}

// BenchmarkAppendFull: BenchmarkAppend/v7 with 1,000,000 jobs already
// stored; compare with an empty file.
func BenchmarkAppendFull(b *testing.B) {
	j := openJournal(b, bigJournal(b))
	benchAppend(b, j, v7, false)
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(etcdtest.Leftovers, goleak.IgnoreAnyFunction(boltstore.StoppedCheck), goleak.Cleanup(func(code int) {
		if bigDir != "" {
			os.RemoveAll(bigDir)
		}
		os.Exit(code) // the cleanup replaces goleak's own exit
	}))...)
}
