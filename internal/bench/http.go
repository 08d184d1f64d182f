package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
)

// HTTPOptions is a run of the HTTP job API: Senders producers, each
// with one request in flight on its keep-alive connection, post Jobs
// jobs of Size bytes, one a request, or Bulk a request (a JSON array).
type HTTPOptions struct {
	Senders, Jobs, Size, Bulk int
	Progress                  io.Writer // nil = none
}

// HTTPResult is what a run of the HTTP job API measured: jobs answered
// 201 (durable) a second, and the request latencies.
type HTTPResult struct {
	Jobs       int     `json:"jobs"`
	Senders    int     `json:"senders"`
	Bulk       int     `json:"bulk"`
	Size       int     `json:"size"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	P50, P99   float64 `json:"-"`
	Errors     int64   `json:"errors"`
}

// RunHTTP runs o against a broker of its own with its admin listener on
// a free 127.0.0.1 port.
func RunHTTP(ctx context.Context, o HTTPOptions) (HTTPResult, error) {
	if o.Senders < 1 || o.Jobs < 1 || o.Size < 0 {
		return HTTPResult{}, fmt.Errorf("bench: senders and jobs must be 1 or more, size 0 or more")
	}
	srvOpts := admin.DefaultOptions()
	srvOpts.Addr = "127.0.0.1:0"
	srvOpts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := admin.New(srvOpts)
	if err != nil {
		return HTTPResult{}, err
	}
	b, stop, err := runBroker(ctx, func(opts *broker.Options) error {
		opts.Observer = srv.Observer()
		return nil
	})
	if err != nil {
		return HTTPResult{}, err
	}
	defer stop()
	srv.Serve(b)
	if err := srv.Start(); err != nil {
		return HTTPResult{}, err
	}
	defer srv.Close()
	url := "http://" + srv.Addr() + "/api/v1/queues/bench/jobs"
	per := max(o.Bulk, 1)
	body, ct := bytes.Repeat([]byte("x"), o.Size), "application/octet-stream"
	if o.Bulk > 0 {
		payload, _ := json.Marshal(string(body))
		one := `{"payload":` + string(payload) + `}`
		body, ct = []byte("["+strings.Repeat(one+",", o.Bulk-1)+one+"]"), "application/json"
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Senders}}
	requests := (o.Jobs + per - 1) / per
	var next, done, errs atomic.Int64
	lat := make([][]time.Duration, o.Senders)
	var stopProgress func()
	if o.Progress != nil {
		stopProgress = progress(o.Progress, requests*per, &done)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for s := range o.Senders {
		wg.Go(func() {
			for next.Add(1) <= int64(requests) && ctx.Err() == nil {
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
				req.Header.Set("Content-Type", ct)
				req.Header.Set(admin.Header, "bench")
				resp, err := hc.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					errs.Add(1)
					continue
				}
				lat[s] = append(lat[s], time.Since(t0))
				done.Add(int64(per))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if stopProgress != nil {
		stopProgress()
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	p50, p99, _, _ := percentiles(all)
	return HTTPResult{Jobs: int(done.Load()), Senders: o.Senders, Bulk: o.Bulk, Size: o.Size, Seconds: took.Seconds(),
		JobsPerSec: float64(done.Load()) / took.Seconds(), P50: p50, P99: p99, Errors: errs.Load()}, ctx.Err()
}
