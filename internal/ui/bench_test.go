package ui_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// BenchmarkOverviewPage loads the overview in the browser, from the
// navigation to its table drawn, with EMQ_UI_BENCH_JOBS stored jobs
// (default 100,000; the figure is 1,000,000) in 100 queues, a
// tenth of them dead. It reports the page's ms and the API's alone.
//
//	EMQ_UI_BENCH_JOBS=1000000 go test ./internal/ui -run '^$' -bench OverviewPage -benchtime 10x
func BenchmarkOverviewPage(b *testing.B) {
	n := 100_000
	if v := os.Getenv("EMQ_UI_BENCH_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	start := time.Now()
	if err := fill(filepath.Join(dir, broker.JournalFile), n, 100); err != nil {
		b.Fatal(err)
	}
	b.Logf("stored %d jobs in %.1f s", n, time.Since(start).Seconds())
	start = time.Now()
	br := bt.StartAdmin(b, dir, func(o *broker.Options) {}, nil)
	b.Logf("broker ready in %.1f s", time.Since(start).Seconds())

	var api time.Duration
	for range 5 {
		t0 := time.Now()
		if code := adminAPI(b, br, "GET", "/api/v1/overview", "", nil); code != 200 {
			b.Fatalf("overview: %d", code)
		}
		api += time.Since(t0)
	}
	tb := newTab(b, base(br))
	tb.open("")
	tb.until("the first load", `document.querySelectorAll('tr[data-queue]').length === 100`)
	loads := 0
	for b.Loop() { // the setup above runs once
		tb.do(chromedp.Navigate(fmt.Sprintf("%s/ui/?load=%d", tb.base, loads)))
		tb.until("the overview", `document.querySelectorAll('tr[data-queue]').length === 100`)
		loads++
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(loads), "ms/page")
	b.ReportMetric(float64(api.Milliseconds())/5, "ms/api")
	b.ReportMetric(0, "ns/op")
}

// fill stores n jobs in queues q000..: a tenth dead, the rest pending.
func fill(path string, n, queues int) error {
	j, err := boltstore.Open(path, boltstore.DefaultOptions())
	if err != nil {
		return err
	}
	defer j.Close()
	errs := make(chan error, 4096)
	var failed atomic.Value
	inFlight := 0
	payload := make([]byte, 100)
	for i := range n {
		if inFlight == cap(errs) {
			if err := <-errs; err != nil {
				return err
			}
			inFlight--
		}
		job := &store.Job{MsgID: emqp.NewID(), Queue: fmt.Sprintf("q%03d", i%queues), Payload: payload, Enqueued: time.Now()}
		dead := i%10 == 0
		j.Append(job, func(_ bool, err error) {
			if err == nil && dead {
				j.Bury(job.MsgID, "benchmark", nil, func(_ *store.Job, err error) {
					if err != nil {
						failed.Store(err)
					}
				})
			}
			errs <- err
		})
		inFlight++
	}
	for ; inFlight > 0; inFlight-- {
		if err := <-errs; err != nil {
			return err
		}
	}
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}
