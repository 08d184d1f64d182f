package broker_test

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// BenchmarkSchedules is a broker keeping 100,000 schedules (half every
// so many seconds, half cron) with nothing else to do: it reports the
// broker's CPU use while it waits (goal: under 1 % of one core) and the
// heap the schedules take, then how late the fires of 1,000 schedules due
// in the same second reach a worker waiting for them (goal: every one
// within 100 ms). Lateness counts from the due time to the REQUEST read
// by the worker: the journal transaction of the fire, the dispatch and
// the loopback hop.
//
//	go test -run '^$' -bench 'BenchmarkSchedules$' -benchtime 1x ./broker/
//
// EMQ_BENCH_SCHEDULES=N keeps N schedules instead of 100,000.
func BenchmarkSchedules(b *testing.B) {
	if testing.Short() {
		b.Skip("takes about a minute")
	}
	kept, due := 100_000, 1_000
	if n, err := strconv.Atoi(os.Getenv("EMQ_BENCH_SCHEDULES")); err == nil {
		kept = n
	}
	const idle = 20 * time.Second // the window in which CPU is measured
	dir := b.TempDir()
	start := time.Now()
	var dueAt time.Time
	func() {
		j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), boltstore.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		defer j.Close()
		far := time.Now().Add(24 * time.Hour)
		putAll(b, j, kept-due, func(i int) *store.Schedule {
			s := &store.Schedule{ID: "idle-" + strconv.Itoa(i), Queue: "later", Payload: make([]byte, 100), Left: -1, Next: far, Created: start}
			if i%2 == 0 {
				s.Every = time.Duration(3600+i%86400) * time.Second
			} else {
				s.Cron = strconv.Itoa(i%60) + " " + strconv.Itoa(i%24) + " * * *"
			}
			return s
		})
		// Due after the replay and the idle window, all in one second.
		dueAt = time.Now().Add(time.Since(start)/4 + idle + 10*time.Second).Truncate(time.Second)
		putAll(b, j, due, func(i int) *store.Schedule {
			return &store.Schedule{ID: "due-" + strconv.Itoa(i), Queue: "due", Payload: make([]byte, 100), Left: -1,
				Every: time.Hour, Next: dueAt, Created: start}
		})
	}()
	b.Logf("stored %d schedules in %v", kept, time.Since(start).Round(time.Millisecond))

	heap0 := heapInUse()
	replay := time.Now()
	br := bt.Start(b, dir, func(o *broker.Options) {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	b.Logf("replayed in %v", time.Since(replay).Round(time.Millisecond))
	cpuShare, window := idleCPU(b, idle, dueAt, 3*time.Second)
	heap := heapInUse() - heap0
	b.Logf("idle %v: CPU %.3f%% of a core, heap %.1f MiB; waiting for %d fires due at %s",
		window, 100*cpuShare, float64(heap)/(1<<20), due, dueAt.Format(time.RFC3339))
	late := lateness(b, br.Backend(), "due", due, func(*emqp.Request) time.Time { return dueAt })
	b.ReportMetric(100*cpuShare, "%cpu-idle")
	b.ReportMetric(float64(heap)/float64(kept), "heap-B/schedule")
	reportLateness(b, late)
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
