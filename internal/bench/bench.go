// Package bench is emq bench: jobs through a real broker, over real
// sockets, with the client and worker libraries, timed.
//
// Each of Senders clients keeps up to Window Requests in flight (each waits
// for its REPLY); one worker serves the queue with Slots slots and replies
// at once. REQUEST→ACK is timed from the call to the ACK, REQUEST→REPLY to
// the REPLY. Lost counts jobs ACKed but never run by the worker.
//
// With AckOnly each sender waits for the ACK only, as the anchors'
// producers wait for their put's acknowledgement; the worker still runs
// every job, jobs/s runs from the first REQUEST to the last job run, and
// the E2E figures are enqueue→run, measured when the worker runs the job.
//
// With Priorities N every job carries a priority header (N values, in
// turn; 1: the same on every job), with Unique a unique key of its own:
// what they cost the broker shows against a run without (issue 30 wants
// both within 10%). With more than one value the broker runs the lowest
// number first, so while senders wait for their REPLYs the jobs of the
// high numbers wait behind the others: REQUEST→REPLY's tail grows, and
// with it the windows stuck on them, which leaves fewer Requests to share
// each commit. With AckOnly the senders do not wait on the order the
// jobs run in.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	"github.com/eventmq/emq/worker"
)

// Options say what to measure.
type Options struct {
	Frontend, Backend string  // a running broker's endpoints; "" = start one in a temp dir
	Senders           int     // clients, each with its own connection
	Window            int     // Requests in flight per sender
	Slots             int     // worker slots
	Jobs              int     // jobs in all
	Size              int     // payload bytes
	Rate              float64 // jobs a second in all; 0 = as fast as it goes
	Preload           int     // jobs stored in the journal before the broker starts (own broker only)
	AckOnly           bool    // senders wait for the ACK only (see the package doc)
	Priorities        int     // every job has a priority header, this many values in turn (0: none)
	Unique            bool    // every job has a unique key, its own
	Batch             string  // every job is in this batch (issue 32 wants it within 10 % of plain jobs)
	Tenants           int     // every job has a tenant header, this many names in turn (0: none; issue 45 wants 1,000 within 10 % of plain jobs)
	// Limit: every job names this limiter (header limit:). The bench's own
	// broker makes it with a concurrency no run reaches, so that it never
	// binds and what shows is its cost; a running broker must have it.
	Limit string
	Queue string // the queue the jobs go to ("" = "bench"): benches on one placement of shards pick one each
	// BackupTo, with the bench's own broker, backs its journal up into
	// this file BackupAfter into the run: the jobs done a second meanwhile,
	// beside those from the first second to its start, show what a
	// backup costs a serving broker (issue 33).
	BackupTo   string
	BackupPace int64 // bytes a second the backup may write (0: as fast as it goes)
	// JournalKeys, with the bench's own broker, encrypt its journal at
	// rest (--journal-keys; issue 48 wants it within 10 % of without).
	JournalKeys *store.Keyring
	// Rekey, with JournalKeys of two keys or more and a Preload, stores
	// the preload under the last key and, BackupAfter into the run, has
	// the broker seal it again under the first (emq journal rekey) at
	// RekeyRate values a second (0: the default): the jobs done a second
	// meanwhile, beside those before it, show what a rekey costs a
	// serving broker (issue 48). The run must outlast it.
	Rekey     bool
	RekeyRate int
	// BackupAfter is when the backup (or the rekey) starts (0: 6 s, which leaves 5 s
	// after a second's warm-up to measure the broker before it).
	BackupAfter time.Duration
	// Curve runs the bench's own broker with CURVE, its senders and
	// worker with a key each; Security is the credentials for a running
	// broker (Frontend, Backend).
	Curve    bool
	Security client.Security
	// TracerProvider, if set, takes the spans of the senders, the worker
	// and the bench's own broker: what tracing costs shows against a run
	// without (whose senders and worker use OpenTelemetry's global
	// provider, as by default, and make no spans).
	TracerProvider trace.TracerProvider
	Progress       io.Writer
	Logger         *slog.Logger
	// OnStart, if set, is called as the first job is sent (after the
	// preload and the broker's start): to profile the run alone. Its
	// error ends the run.
	OnStart func() error
}

// Result is what was measured. Times are in milliseconds.
type Result struct {
	Jobs       int     `json:"jobs"`
	Seconds    float64 `json:"seconds"`
	JobsPerSec float64 `json:"jobs_per_sec"`
	AckP50     float64 `json:"ack_p50_ms"`
	AckP99     float64 `json:"ack_p99_ms"`
	AckP999    float64 `json:"ack_p999_ms"`
	AckMax     float64 `json:"ack_max_ms"`
	E2EP50     float64 `json:"e2e_p50_ms"`
	E2EP99     float64 `json:"e2e_p99_ms"`
	E2EP999    float64 `json:"e2e_p999_ms"`
	E2EMax     float64 `json:"e2e_max_ms"`
	Errors     int     `json:"errors"`     // Requests that failed
	Lost       int     `json:"lost"`       // ACKed, never run
	Duplicates int     `json:"duplicates"` // runs beyond the first
	Senders    int     `json:"senders"`
	Window     int     `json:"window"`
	Slots      int     `json:"slots"`
	Size       int     `json:"size"`
	Rate       float64 `json:"rate,omitempty"`
	Preload    int     `json:"preload,omitempty"`
	AckOnly    bool    `json:"ack_only,omitempty"`
	Priorities int     `json:"priorities,omitempty"`
	Unique     bool    `json:"unique,omitempty"`
	Batch      string  `json:"batch,omitempty"`
	// The backup's (BackupTo): how long it took, what it wrote, and jobs
	// done a second while it ran and before it (from the run's first
	// second to the backup's start).
	BackupSec        float64 `json:"backup_seconds,omitempty"`
	BackupBytes      int64   `json:"backup_bytes,omitempty"`
	BackupJobsPerSec float64 `json:"backup_jobs_per_sec,omitempty"`
	BeforeJobsPerSec float64 `json:"before_jobs_per_sec,omitempty"`
	// The rekey's (Rekey): how long it took, the values it sealed again,
	// jobs done a second while it ran (before it: BeforeJobsPerSec).
	RekeySec        float64 `json:"rekey_seconds,omitempty"`
	RekeyValues     int64   `json:"rekey_values,omitempty"`
	RekeyJobsPerSec float64 `json:"rekey_jobs_per_sec,omitempty"`
	ReplaySec       float64 `json:"replay_seconds,omitempty"`
	// The journal's commits during the run (own broker only): how many a
	// job cost, how long one took, how many writes shared one.
	CommitsPerJob   float64 `json:"commits_per_job,omitempty"`
	CommitMeanMs    float64 `json:"commit_mean_ms,omitempty"`
	WritesPerCommit float64 `json:"writes_per_commit,omitempty"`
	RSSMiB          float64 `json:"rss_mib"`
	// PerSecond is the jobs done in each second of the run (--json):
	// what a window of it did, beside the same window of another run.
	PerSecond []int64 `json:"per_second,omitempty"`
}

// Run measures.
func Run(ctx context.Context, o Options) (Result, error) {
	queue := o.Queue
	if queue == "" {
		queue = "bench"
	}
	if o.Senders < 1 || o.Slots < 1 || o.Jobs < 1 || o.Window < 1 || o.Size < 0 {
		return Result{}, fmt.Errorf("bench: senders, window, slots and jobs must be at least 1")
	}
	switch {
	case o.Frontend != "" && o.Preload > 0:
		return Result{}, fmt.Errorf("bench: --preload needs the bench's own broker")
	case o.Frontend != "" && o.BackupTo != "":
		return Result{}, fmt.Errorf("bench: --backup needs the bench's own broker")
	case o.Rekey && (o.Frontend != "" || o.JournalKeys == nil || len(o.JournalKeys.Names()) < 2 || o.Preload == 0):
		return Result{}, fmt.Errorf("bench: --rekey needs the bench's own broker, --journal-keys of two keys or more (the preload goes under the last, the rekey seals it under the first) and --preload")
	case o.Rekey && o.BackupTo != "":
		return Result{}, fmt.Errorf("bench: --rekey and --backup: one at a time")
	case (o.BackupTo != "" || o.Rekey) && o.BackupAfter != 0 && o.BackupAfter <= time.Second:
		return Result{}, fmt.Errorf("bench: --backup-after must be over 1s (its first second is warm-up, the rest measures before the backup), got %v", o.BackupAfter)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res := Result{Jobs: o.Jobs, Senders: o.Senders, Window: o.Window, Slots: o.Slots, Size: o.Size, Rate: o.Rate, Preload: o.Preload,
		AckOnly: o.AckOnly, Priorities: o.Priorities, Unique: o.Unique, Batch: o.Batch}
	commits := new(commitCount)
	var own *broker.Broker
	if o.Frontend == "" {
		b, stop, replay, err := startBroker(ctx, &o, commits)
		own = b
		if err != nil {
			return res, err
		}
		defer stop()
		res.ReplaySec = replay.Seconds()
	}

	commits.reset() // start-up's commits are not the run's
	var mu sync.Mutex
	runs := make(map[string]int, o.Jobs)
	sent := make(map[string]time.Time) // AckOnly: when each job was sent
	var ranAll []time.Duration         // AckOnly: enqueue→run of each job, first runs
	var lastRun time.Time
	allRun := make(chan struct{})
	w, err := worker.New(worker.Options{Broker: o.Backend, Concurrency: o.Slots, Logger: o.Logger, Security: o.Security,
		TracerProvider: o.TracerProvider})
	if err != nil {
		return res, err
	}
	w.Handle(queue, func(_ context.Context, j *worker.Job) ([]byte, error) {
		now := time.Now()
		mu.Lock()
		if runs[j.MsgID]++; o.AckOnly && runs[j.MsgID] == 1 {
			if t0, ok := sent[j.MsgID]; ok {
				ranAll = append(ranAll, now.Sub(t0))
			}
			lastRun = now
			if len(ranAll) == o.Jobs {
				close(allRun)
			}
		}
		mu.Unlock()
		return nil, nil
	})
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	defer func() { stopWorker(); <-workerDone }()

	clients := make([]*client.Client, o.Senders)
	for i := range clients {
		if clients[i], err = client.New(client.Options{Broker: o.Frontend, Logger: o.Logger, Security: o.Security,
			TracerProvider: o.TracerProvider}); err != nil {
			return res, err
		}
		defer clients[i].Close()
	}

	payload := make([]byte, o.Size)
	ack := make([]time.Duration, o.Jobs)
	e2e := make([]time.Duration, o.Jobs)
	acked := make([]string, o.Jobs)
	var next, done, failed atomic.Int64
	if o.OnStart != nil {
		if err := o.OnStart(); err != nil {
			return res, err
		}
	}
	stopProgress := progress(o.Progress, o.Jobs, &done)
	start := time.Now()
	backupDone := make(chan error, 1)
	switch {
	case o.BackupTo != "":
		go func() { backupDone <- backupDuring(ctx, own, o, &done, &res) }()
	case o.Rekey:
		go func() { backupDone <- rekeyDuring(ctx, own, o, &done, &res) }()
	default:
		backupDone <- nil
	}
	stopTimeline := timeline(&done, &res.PerSecond)
	var wg sync.WaitGroup
	for s := range o.Senders {
		for range o.Window {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(o.Jobs) {
						return
					}
					if o.Rate > 0 { // job i starts at its time: an exact rate
						at := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
						select {
						case <-time.After(time.Until(at)):
						case <-ctx.Done():
							return
						}
					}
					id := emqp.NewID()
					opts := jobOptions(o, i, id)
					t0 := time.Now()
					rctx, cancel := context.WithTimeout(ctx, time.Minute)
					var err error
					opts = append(opts, client.OnAck(func() { ack[i] = time.Since(t0) }))
					if o.AckOnly {
						mu.Lock()
						sent[id] = t0
						mu.Unlock()
						_, err = clients[s].Send(rctx, queue, payload, opts...)
					} else {
						_, err = clients[s].Request(rctx, queue, payload, opts...)
					}
					cancel()
					if ack[i] > 0 {
						acked[i] = id
					}
					switch {
					case err != nil:
						failed.Add(1)
					case !o.AckOnly:
						e2e[i] = time.Since(t0)
					}
					done.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopTimeline()
	if err := <-backupDone; err != nil {
		return res, err
	}
	if o.AckOnly && failed.Load() == 0 { // to the last job run
		select {
		case <-allRun:
		case <-time.After(time.Minute):
		case <-ctx.Done():
		}
		mu.Lock()
		if !lastRun.IsZero() {
			elapsed = lastRun.Sub(start)
		}
		copy(e2e, ranAll)
		mu.Unlock()
	}
	stopProgress()
	if err := ctx.Err(); err != nil {
		return res, err
	}

	res.Seconds = elapsed.Seconds()
	res.JobsPerSec = float64(o.Jobs) / res.Seconds
	res.Errors = int(failed.Load())
	res.AckP50, res.AckP99, res.AckP999, res.AckMax = percentiles(ack)
	res.E2EP50, res.E2EP99, res.E2EP999, res.E2EMax = percentiles(e2e)
	mu.Lock()
	for _, id := range acked {
		if id != "" && runs[id] == 0 {
			res.Lost++
		}
	}
	for _, n := range runs {
		res.Duplicates += n - 1
	}
	mu.Unlock()
	if n, writes, took := commits.read(); n > 0 {
		res.CommitsPerJob = float64(n) / float64(o.Jobs)
		res.CommitMeanMs = took.Seconds() * 1e3 / float64(n)
		res.WritesPerCommit = float64(writes) / float64(n)
	}
	res.RSSMiB = RSSMiB("self")
	return res, nil
}

// jobOptions are the options of job i, msgid id: its msgid, and the
// priority and unique key o asks for.
func jobOptions(o Options, i int64, id string) []client.Option {
	opts := []client.Option{client.MsgID(id)}
	if o.Priorities > 0 {
		opts = append(opts, client.Priority(uint16(i%int64(o.Priorities))))
	}
	if o.Batch != "" {
		opts = append(opts, client.Batch(o.Batch, false))
	}
	if o.Unique {
		opts = append(opts, client.Unique("bench-"+id, 0))
	}
	if o.Tenants > 0 {
		opts = append(opts, client.Header(emqp.HeaderTenant, "t"+strconv.FormatInt(i%int64(o.Tenants), 10)))
	}
	if o.Limit != "" {
		opts = append(opts, client.Header(emqp.HeaderLimit, o.Limit))
	}
	return opts
}

// commitCount adds up the own broker's journal commits.
type commitCount struct {
	n, writes, nanos atomic.Int64
}

// Committed implements broker.Observer; the others ignore what they see.
func (c *commitCount) Committed(writes int, took time.Duration) {
	c.n.Add(1)
	c.writes.Add(int64(writes))
	c.nanos.Add(int64(took))
}

func (c *commitCount) Replayed(time.Duration) {}
func (c *commitCount) Fired(time.Duration)    {}
func (c *commitCount) Acked(time.Duration)    {}

func (c *commitCount) reset() { c.n.Store(0); c.writes.Store(0); c.nanos.Store(0) }

func (c *commitCount) read() (n, writes int64, took time.Duration) {
	return c.n.Load(), c.writes.Load(), time.Duration(c.nanos.Load())
}

// startBroker runs a broker on free ports in a temp dir, after storing
// o.Preload jobs in its journal; it returns how long start-up took. Its
// journal's commits are added to commits.
func startBroker(ctx context.Context, o *Options, commits *commitCount) (_ *broker.Broker, stop func(), replay time.Duration, err error) {
	var start time.Time // after the preload: start-up alone
	b, stop, err := runBroker(ctx, func(opts *broker.Options) error {
		opts.MaxPending = 0
		opts.Logger = o.Logger
		opts.Observer = commits
		opts.TracerProvider = o.TracerProvider
		opts.JournalKeys = o.JournalKeys
		if o.Curve {
			sec, err := curveFiles(opts)
			if err != nil {
				return err
			}
			o.Security = sec
		}
		if o.Preload > 0 {
			keys := o.JournalKeys
			if o.Rekey { // under the last key: the rekey's to seal again
				names := keys.Names()
				var err error
				if keys, err = keys.With(names[len(names)-1]); err != nil {
					return err
				}
			}
			if err := preload(filepath.Join(opts.DataDir, broker.JournalFile), o.Preload, o.Size, keys, o.Progress); err != nil {
				return err
			}
		}
		start = time.Now()
		return nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	if o.Limit != "" {
		if err := b.SetLimiter(ctx, o.Limit, store.LimiterSettings{Concurrency: store.MaxConcurrency}); err != nil {
			stop()
			return nil, nil, 0, fmt.Errorf("making limiter %s: %w", o.Limit, err)
		}
	}
	o.Frontend, o.Backend = b.Frontend(), b.Backend()
	return b, stop, time.Since(start), nil
}

// runBroker runs a broker on free ports, without pub/sub unless edit
// turns it on, with its journal in a new temp dir, which stop removes.
// edit may change the options and prepare the dir first.
func runBroker(ctx context.Context, edit func(*broker.Options) error) (_ *broker.Broker, stop func(), err error) {
	dir, err := os.MkdirTemp("", "emq-bench-")
	if err != nil {
		return nil, nil, err
	}
	opts := broker.DefaultOptions()
	opts.Frontend, opts.Backend, opts.DataDir = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", dir
	opts.OpenJournal = boltjournal.Open
	opts.PublisherIncoming, opts.PublisherOutgoing = "", ""
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := edit(&opts); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	b, err := broker.New(opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	bctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	select {
	case <-b.Ready():
	case err := <-done:
		cancel()
		os.RemoveAll(dir)
		return nil, nil, err
	case <-ctx.Done():
		cancel()
		<-done
		os.RemoveAll(dir)
		return nil, nil, ctx.Err()
	}
	return b, func() { cancel(); <-done; os.RemoveAll(dir) }, nil
}

// preload stores n jobs in a queue nobody serves, so they stay.
func preload(path string, n, size int, keys *store.Keyring, progressTo io.Writer) error {
	bo := boltstore.DefaultOptions()
	bo.Keys = keys
	j, err := boltstore.Open(path, bo)
	if err != nil {
		return err
	}
	defer j.Close()
	var done atomic.Int64
	stop := progress(progressTo, n, &done)
	defer stop()
	errs := make(chan error, 4096)
	payload := make([]byte, size)
	inFlight := 0
	for range n {
		if inFlight == cap(errs) {
			if err := <-errs; err != nil {
				return err
			}
			inFlight--
		}
		j.Append(&store.Job{MsgID: emqp.NewID(), Queue: "preloaded", Payload: payload}, func(_ bool, err error) {
			done.Add(1)
			errs <- err
		})
		inFlight++
	}
	for ; inFlight > 0; inFlight-- {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// percentiles returns p50, p99, p99.9 and max in milliseconds, of the
// non-zero durations.
func percentiles(d []time.Duration) (p50, p99, p999, mx float64) {
	s := slices.DeleteFunc(slices.Clone(d), func(x time.Duration) bool { return x == 0 })
	if len(s) == 0 {
		return
	}
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return float64(s[max(0, min(i, len(s)-1))]) / 1e6
	}
	return at(0.5), at(0.99), at(0.999), float64(s[len(s)-1]) / 1e6
}

// progress draws a bar on w every 200 ms until stopped.
// timeline notes into per the jobs done each second, until stop.
func timeline(done *atomic.Int64, per *[]int64) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-t.C:
				n := done.Load()
				*per = append(*per, n-last)
				last = n
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}

func progress(w io.Writer, total int, done *atomic.Int64) (stop func()) {
	if w == nil {
		return func() {}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	start := time.Now()
	draw := func() {
		n := done.Load()
		frac := float64(n) / float64(total)
		bar := strings.Repeat("=", int(frac*30)) + strings.Repeat(" ", 30-int(frac*30))
		rate := float64(n) / time.Since(start).Seconds()
		fmt.Fprintf(w, "\r[%s] %d/%d  %s/s ", bar, n, total, strconv.FormatFloat(rate, 'f', 0, 64))
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				draw()
			case <-quit:
				draw()
				fmt.Fprintln(w)
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// RSSMiB is the resident memory of a process ("self", or a pid as text) in
// MiB, from /proc; 0 when it cannot be read.
func RSSMiB(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// curveFiles writes a CURVE key pair for the broker and one for the
// bench's peers (client and worker) in opts.DataDir, and sets opts to
// use them; it returns the peers' credentials.
func curveFiles(opts *broker.Options) (client.Security, error) {
	server, serverSecret, err := zmtp.NewKeyPair()
	if err != nil {
		return client.Security{}, err
	}
	peer, peerSecret, err := zmtp.NewKeyPair()
	if err != nil {
		return client.Security{}, err
	}
	opts.CurveSecretKeyFile = filepath.Join(opts.DataDir, "broker.key")
	opts.CurveClients = filepath.Join(opts.DataDir, "clients")
	if err := os.WriteFile(opts.CurveSecretKeyFile, []byte(serverSecret.String()+"\n"), 0o600); err != nil {
		return client.Security{}, err
	}
	if err := os.WriteFile(opts.CurveClients, []byte(peer.String()+" client,worker\n"), 0o644); err != nil {
		return client.Security{}, err
	}
	return client.Security{ServerKey: server.String(), SecretKey: peerSecret.String()}, nil
}

// wait waits d, or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// untilDuring waits o.BackupAfter into the run (6 s if unset), notes in
// res the jobs done a second from its first second (warm-up) until then,
// and returns the jobs done by then and when: what --backup and --rekey
// measure against.
func untilDuring(ctx context.Context, o Options, done *atomic.Int64, res *Result) (int64, time.Time, error) {
	after := o.BackupAfter
	if after <= 0 {
		after = 6 * time.Second
	}
	if err := wait(ctx, time.Second); err != nil { // warm-up
		return 0, time.Time{}, err
	}
	d1, t1 := done.Load(), time.Now()
	if err := wait(ctx, after-time.Second); err != nil {
		return 0, time.Time{}, err
	}
	d0, t0 := done.Load(), time.Now()
	res.BeforeJobsPerSec = float64(d0-d1) / t0.Sub(t1).Seconds()
	return d0, t0, nil
}

// rekeyDuring starts b's rekey o.BackupAfter into the run, waits for its
// end, and notes how long it took and the jobs done a second meanwhile
// and before it. The run must outlast it.
func rekeyDuring(ctx context.Context, b *broker.Broker, o Options, done *atomic.Int64, res *Result) error {
	d0, t0, err := untilDuring(ctx, o, done, res)
	if err != nil {
		return err
	}
	if _, err := b.Rekey(o.RekeyRate); err != nil {
		return err
	}
	for {
		if err := wait(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if s := b.RekeyStatus(); !s.Running {
			if s.Finished.IsZero() {
				return fmt.Errorf("bench: the rekey stopped: %s", s)
			}
			took := time.Since(t0)
			res.RekeySec, res.RekeyValues = took.Seconds(), s.Resealed
			res.RekeyJobsPerSec = float64(done.Load()-d0) / took.Seconds()
			if done.Load() >= int64(o.Jobs) {
				return fmt.Errorf("bench: the run ended before the rekey did: give it more --jobs")
			}
			return nil
		}
	}
}

// backupDuring backs b's journal up into o.BackupTo o.BackupAfter into
// the run, and notes how long it took and the jobs done a second
// meanwhile and before it. The run must outlast it.
func backupDuring(ctx context.Context, b *broker.Broker, o Options, done *atomic.Int64, res *Result) error {
	f, err := os.Create(o.BackupTo)
	if err != nil {
		return err
	}
	defer f.Close()
	d0, t0, err := untilDuring(ctx, o, done, res)
	if err != nil {
		return err
	}
	st, err := b.Backup(ctx, f, store.BackupHeader{MadeBy: "emq bench", Pace: o.BackupPace})
	if err == nil {
		err = f.Sync()
	}
	took := time.Since(t0)
	res.BackupSec, res.BackupBytes = took.Seconds(), st.Bytes
	res.BackupJobsPerSec = float64(done.Load()-d0) / took.Seconds()
	if err == nil && done.Load() >= int64(o.Jobs) {
		err = fmt.Errorf("bench: the run ended before the backup did: give it more --jobs")
	}
	return err
}
