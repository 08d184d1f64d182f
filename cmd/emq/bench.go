package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/internal/bench"
	"github.com/eventmq/emq/store"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure jobs/s and latencies through a real broker",
		Long: `Run --jobs jobs of --size bytes through a broker: its own, on free
ports in a temp dir, unless --frontend and --backend name a running one.
--senders clients each keep --window Requests in flight; one worker serves
with --slots slots. Every job is durable (fsync before ACK). Prints jobs/s
and REQUEST→ACK and REQUEST→REPLY latencies; lost (ACKed, never run) must
be 0. --rate paces the senders; --preload stores that many jobs first (in
a queue nobody serves) to measure start-up and a full journal.
--priorities N gives every job a priority header (N values in turn, 1 the
same on every job), --unique a unique key of its own: run with and
without to see what they cost. With more than one value the jobs of the
high numbers wait behind the others, and senders waiting for their
REPLYs wait with them; --ack-only takes the senders out of that.

With --pubsub it measures pub/sub instead: one publisher sends --messages
PUBLISHes of --size bytes as fast as it can to --subscribers SUB
connections (on its own broker, each may queue the whole run), and
--stuck more subscribers that never read. Prints deliveries/s (messages
received, summed over the reading subscribers), the publisher's rate and
publish→received latencies.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	benchFlags(&binder{f: f}, new(benchDefaults()))
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var bo benchOptions
		b := reader()
		benchFlags(b, &bo)
		if err := b.apply(c); err != nil {
			return err
		}
		o := bo.run
		if o.Security, err = securityFrom(c); err != nil {
			return err
		}
		if file := bo.keys; file != "" {
			if o.Frontend != "" {
				return fmt.Errorf("journal-keys: for the bench's own broker; a running broker has its own")
			}
			if o.JournalKeys, err = store.ReadKeyring(file); err != nil {
				return err
			}
		}
		if o.Curve && o.Frontend != "" {
			return fmt.Errorf("curve: for the bench's own broker; a running broker's keys go in --curve-server-key and --curve-key-file")
		}
		if bo.pubsub {
			return benchPubSub(cmd, bo)
		}
		if (o.Frontend == "") != (o.Backend == "") {
			return fmt.Errorf("frontend and backend: give both, or neither")
		}
		if !bo.quiet {
			o.Progress = cmd.ErrOrStderr()
		}
		// The profile and the trace are of the run: from its first job, not
		// of a preload or the replay before it.
		var starts []func() error
		for _, rec := range []struct {
			flag, path string
			start      func(io.Writer) error
			stop       func()
		}{{"cpuprofile", bo.cpuprofile, pprof.StartCPUProfile, pprof.StopCPUProfile}, {"trace", bo.trace, trace.Start, trace.Stop}} {
			start, stop, err := record(rec.path, rec.start, rec.stop)
			if err != nil {
				return fmt.Errorf("%s: %w", rec.flag, err)
			}
			defer stop()
			starts = append(starts, func() error {
				if err := start(); err != nil {
					return fmt.Errorf("%s: %w", rec.flag, err)
				}
				return nil
			})
		}
		if bo.memprofile != "" {
			starts = append(starts, func() error { return heapProfile(bo.memprofile) })
		}
		startRecording := func() error {
			for _, start := range starts {
				if err := start(); err != nil {
					return err
				}
			}
			return nil
		}
		if bo.http {
			if err := startRecording(); err != nil {
				return err
			}
			return benchHTTP(cmd, bo, o)
		}
		o.OnStart = startRecording
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		tp, stopTracing, err := tracerProvider("emq-bench", log)
		if err != nil {
			return err
		}
		defer stopTracing()
		o.TracerProvider = tp
		r, err := bench.Run(cmd.Context(), o)
		if bo.memprofile != "" { // TEMP
			heapProfile(bo.memprofile + ".end")
		}
		if err != nil {
			return err
		}
		if bo.asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
		}
		printResult(cmd.OutOrStdout(), r)
		if r.Lost > 0 {
			return fmt.Errorf("%d ACKed jobs were never run", r.Lost)
		}
		return nil
	}
	return cmd
}

// benchOptions are emq bench's flags, but the security ones.
type benchOptions struct {
	run                         bench.Options
	fanout                      bench.PubSubOptions // --pubsub's; its Frontend and Size are run's
	httpBulk                    int
	pubsub, http, asJSON, quiet bool
	cpuprofile, trace, keys     string
	memprofile                  string
}

// benchDefaults are emq bench's defaults.
func benchDefaults() benchOptions {
	return benchOptions{
		run:    bench.Options{Senders: 16, Window: 32, Slots: 16, Jobs: 20000, Size: 100, Queue: "bench", BackupAfter: 6 * time.Second},
		fanout: bench.PubSubOptions{Subscribers: 16, Messages: 200000},
	}
}

// benchFlags declares emq bench's flags, but the security ones.
func benchFlags(b *binder, o *benchOptions) {
	r, p := &o.run, &o.fanout
	b.str(&r.Frontend, "frontend", "a running broker's frontend (default: start one)")
	b.str(&r.Backend, "backend", "a running broker's backend")
	b.integer(&r.Senders, "senders", "clients")
	b.integer(&r.Window, "window", "Requests in flight per sender")
	b.integer(&r.Slots, "slots", "worker slots")
	b.integer(&r.Jobs, "jobs", "jobs in all")
	b.integer(&r.Size, "size", "payload bytes")
	b.float(&r.Rate, "rate", "jobs a second in all (0 = as fast as it goes)")
	b.integer(&r.Preload, "preload", "jobs stored before the broker starts")
	b.boolean(&r.AckOnly, "ack-only", "senders wait for the ACK only, as the anchors' producers do; jobs/s runs to the last job run by the worker")
	b.integer(&r.Priorities, "priorities", "every job has a priority header, this many values in turn (1: the same on every job; 0: none)")
	b.boolean(&r.Unique, "unique", "every job has a unique key (a distinct one each)")
	b.str(&r.Batch, "batch", "every job is in this batch (header batch:NAME)")
	b.integer(&r.Tenants, "tenants", "every job has a tenant header, this many names in turn (0: none)")
	b.str(&r.Limit, "limit", "every job names this limiter (header limit:NAME); the bench's own broker makes it so that it never binds")
	b.str(&r.Queue, "queue", "the queue the jobs go to")
	b.str(&r.BackupTo, "backup", "back the bench's own broker's journal up into this file 6 s into the run (--backup-after), and say what it cost: jobs/s during it beside jobs/s before it")
	b.duration(&r.BackupAfter, "backup-after", "with --backup: when the backup starts (the second before it is warm-up; the rest measures the broker before it)")
	b.size(&r.BackupPace, "backup-pace", "with --backup: bytes a second the backup may write (KiB, MiB; 0 = as fast as it goes)")
	b.boolean(&r.Curve, "curve", "its own broker speaks CURVE, senders and worker each with a key (for a running broker: the --curve-* or --plain-* flags)")
	b.boolean(&r.Rekey, "rekey", "with --journal-keys of two keys or more and --preload: the preload is stored under the last key, and 6 s into the run (--backup-after) the broker seals it again under the first (emq journal rekey); say what it cost: jobs/s during it beside jobs/s before it, and how long it took")
	b.integer(&r.RekeyRate, "rekey-rate", "with --rekey: values a second the rekey seals again (0 = the broker's default)")
	b.str(&o.keys, "journal-keys", "its own broker encrypts its journal at rest with these keys (a file of NAME BASE64 lines: emq keygen --journal NAME)")
	b.boolean(&o.http, "http", "send the jobs through the HTTP job API of its own broker (one a request, --senders producers with keep-alive) instead of eMQP; jobs/s counts jobs answered 201 (durable)")
	b.integer(&o.httpBulk, "http-bulk", "with --http: this many jobs a request (a JSON array, one BULK)")
	b.boolean(&o.pubsub, "pubsub", "measure pub/sub fan-out instead of jobs")
	b.integer(&p.Subscribers, "subscribers", "with --pubsub: subscribers that read")
	b.integer(&p.Stuck, "stuck", "with --pubsub: subscribers that never read")
	b.integer(&p.Messages, "messages", "with --pubsub: messages published")
	b.str(&p.Outgoing, "publisher", "with --pubsub: a running broker's publisher-outgoing (with --frontend)")
	b.integer(&p.HWM, "subscriber-hwm", "with --pubsub: its own broker's subscriber-hwm (0 = the whole run fits)")
	jsonFlag(b, &o.asJSON, "print one JSON object")
	b.boolean(&o.quiet, "quiet", "no progress bar")
	b.str(&o.cpuprofile, "cpuprofile", "write a CPU profile of the run (broker and load together, from the first job sent) to this file")
	b.str(&o.memprofile, "memprofile", "write a heap profile to this file as the run starts, after the preload and the broker's replay: what the stored jobs hold in memory")
	b.str(&o.trace, "trace", "write an execution trace of the run to this file (go tool trace)")
}

// record starts a CPU profile or a trace into the file at path, if one is
// given, and returns what ends it.
// heapProfile writes the heap's live objects to path, after a collection.
func heapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memprofile: %w", err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("memprofile: %w", err)
	}
	return f.Close()
}

// record makes the file at path (none: nothing to record) and returns
// what starts the recording into it and what stops it and closes the
// file, whether it started or not.
func record(path string, start func(io.Writer) error, stop func()) (begin func() error, end func(), err error) {
	if path == "" {
		return func() error { return nil }, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	started := false
	begin = func() error {
		if err := start(f); err != nil {
			return err
		}
		started = true
		return nil
	}
	return begin, func() {
		if started {
			stop()
		}
		f.Close()
	}, nil
}

func printResult(w io.Writer, r bench.Result) {
	fmt.Fprintf(w, "%d jobs of %d bytes, %d senders × %d in flight, %d slots", r.Jobs, r.Size, r.Senders, r.Window, r.Slots)
	e2e := "REQUEST→REPLY"
	if r.AckOnly {
		fmt.Fprint(w, ", senders wait for the ACK only")
		e2e = "enqueue→run  "
	}
	if r.Rate > 0 {
		fmt.Fprintf(w, ", paced at %.0f jobs/s", r.Rate)
	}
	if r.Priorities > 0 {
		fmt.Fprintf(w, ", %d priorities", r.Priorities)
	}
	if r.Unique {
		fmt.Fprint(w, ", a unique key each")
	}
	if r.Batch != "" {
		fmt.Fprintf(w, ", every job in batch %s", r.Batch)
	}
	fmt.Fprintf(w, "\n%.0f jobs/s (%.2f s)\n", r.JobsPerSec, r.Seconds)
	fmt.Fprintf(w, "REQUEST→ACK    p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms  max %.2f ms\n", r.AckP50, r.AckP99, r.AckP999, r.AckMax)
	fmt.Fprintf(w, "%s  p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms  max %.2f ms\n", e2e, r.E2EP50, r.E2EP99, r.E2EP999, r.E2EMax)
	fmt.Fprintf(w, "lost %d, duplicates %d, errors %d, RSS %.0f MiB\n", r.Lost, r.Duplicates, r.Errors, r.RSSMiB)
	if r.RekeySec > 0 {
		fmt.Fprintf(w, "rekey: %.2f s, %d values sealed again (%.0f a second); meanwhile %.0f jobs/s, before it %.0f jobs/s (%.2f)\n", r.RekeySec,
			r.RekeyValues, float64(r.RekeyValues)/r.RekeySec, r.RekeyJobsPerSec, r.BeforeJobsPerSec, r.RekeyJobsPerSec/r.BeforeJobsPerSec)
	}
	if r.BackupSec > 0 {
		fmt.Fprintf(w, "backup: %.2f s, %.0f MiB; meanwhile %.0f jobs/s, before it %.0f jobs/s (%.2f)\n", r.BackupSec,
			float64(r.BackupBytes)/(1<<20), r.BackupJobsPerSec, r.BeforeJobsPerSec, r.BackupJobsPerSec/r.BeforeJobsPerSec)
	}
	if r.CommitsPerJob > 0 {
		fmt.Fprintf(w, "journal: %.2f commits a job, %.3f ms a commit, %.1f writes a commit\n", r.CommitsPerJob, r.CommitMeanMs, r.WritesPerCommit)
	}
	if r.Preload > 0 {
		fmt.Fprintf(w, "preloaded %d jobs; broker ready in %.2f s\n", r.Preload, r.ReplaySec)
	}
}

// benchHTTP measures the HTTP job API (emq bench --http).
func benchHTTP(cmd *cobra.Command, bo benchOptions, o bench.Options) error {
	ho := bench.HTTPOptions{Senders: o.Senders, Jobs: o.Jobs, Size: o.Size, Bulk: bo.httpBulk}
	if o.Frontend != "" {
		return fmt.Errorf("http: for the bench's own broker only")
	}
	if !bo.quiet {
		ho.Progress = cmd.ErrOrStderr()
	}
	r, err := bench.RunHTTP(cmd.Context(), ho)
	if err != nil {
		return err
	}
	if bo.asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%d jobs of %d bytes over HTTP, %d senders, ", r.Jobs, r.Size, r.Senders)
	if r.Bulk > 0 {
		fmt.Fprintf(w, "%d jobs a request\n", r.Bulk)
	} else {
		fmt.Fprint(w, "one job a request\n")
	}
	fmt.Fprintf(w, "%.0f jobs/s durable (%.2f s)\nrequest→201  p50 %.2f ms  p99 %.2f ms\nerrors %d\n", r.JobsPerSec, r.Seconds, r.P50, r.P99, r.Errors)
	if r.Errors > 0 {
		return fmt.Errorf("%d requests were not answered 201", r.Errors)
	}
	return nil
}

func benchPubSub(cmd *cobra.Command, bo benchOptions) error {
	o := bo.fanout
	o.Frontend, o.Size = bo.run.Frontend, bo.run.Size
	r, err := bench.RunPubSub(cmd.Context(), o)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if bo.asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "%d messages of %d bytes, 1 publisher, %d subscribers", r.Messages, r.Size, r.Subscribers)
	if r.Stuck > 0 {
		fmt.Fprintf(w, " and %d stuck", r.Stuck)
	}
	fmt.Fprintf(w, "\n%.0f deliveries/s (%d of %d in %.2f s), publisher %.0f messages/s\n",
		r.DeliveriesPerS, r.Delivered, r.Expected, r.Seconds, r.PublishPerS)
	fmt.Fprintf(w, "publish→received  p50 %.2f ms  p99 %.2f ms  max %.2f ms; RSS %.0f MiB\n", r.P50, r.P99, r.Max, r.RSSMiB)
	if r.Delivered < r.Expected {
		return fmt.Errorf("%d of %d deliveries missing", r.Expected-r.Delivered, r.Expected)
	}
	return nil
}
