package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/worker"
)

const defaultWait = 30 * time.Second

func newWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --exec 'CMD ARGS'",
		Short: "Run a shell command for each job",
		Long: `Serve --queues, running --exec (through /bin/sh -c) once per job, up to
--concurrency at a time. The job's payload is the command's standard input;
its standard output is the REPLY. The environment has EMQ_MSGID, EMQ_QUEUE,
EMQ_ATTEMPT, EMQ_HEADERS (the headers as sent) and EMQ_HEADER_<NAME> for each
header item (name upper-cased, - as _). A job that carries a trace (W3C Trace
Context headers) gives the command TRACEPARENT and TRACESTATE naming the
worker's span of the job, as OpenTelemetry's tools for commands read them;
with the OTEL_* variables set (OTEL_EXPORTER_OTLP_ENDPOINT, ...) the worker
exports that span itself. A non-zero exit is a FAIL with the
tail of standard error; the broker retries the job. At the job's timeout,
or when the job is cancelled, the command's whole process group is killed
(SIGKILL) and the job FAILs saying which. SIGTERM or SIGINT: no new jobs,
running ones get --grace to finish.

Progress (unix): the command gets a pipe as file descriptor 3, named by
EMQ_PROGRESS_FD=3. Each line written there is one progress report for the
broker: a percent from 0 to 100, a short note, or both ("40", "resizing",
"40 resizing"), cut to 1024 bytes. At most 10 a second go out; a newer one
replaces one that waits, so the latest arrives, but one still waiting when
the command ends is dropped. For example:

  emq worker --exec 'echo "10 downloading" >&3; fetch; echo "60 resizing" >&3; resize'`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	workerFlags(&binder{f: f}, new(workerDefaults()), new("default"), new(""))
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var opts worker.Options
		var queues, command string
		b := reader()
		workerFlags(b, &opts, &queues, &command)
		if err := b.apply(c); err != nil {
			return err
		}
		if command == "" {
			return errors.New("exec: the command to run is required (--exec 'CMD ARGS')")
		}
		opts.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
		if opts.Security, err = securityFrom(c); err != nil {
			return err
		}
		if opts.Queues, err = parseQueues(queues); err != nil {
			return err
		}
		tp, stopTracing, err := tracerProvider("emq-worker", opts.Logger)
		if err != nil {
			return err
		}
		defer stopTracing()
		opts.TracerProvider = tp
		w, err := worker.New(opts)
		if err != nil {
			return err
		}
		w.Handle("*", worker.Exec(command))
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return w.Run(ctx)
	}
	return cmd
}

// workerDefaults are emq worker's defaults.
func workerDefaults() worker.Options {
	return worker.Options{Broker: broker.DefaultOptions().Backend, Concurrency: 1,
		Grace: 30 * time.Second, HeartbeatInterval: time.Second, HeartbeatTimeout: 3 * time.Second}
}

// workerFlags declares emq worker's flags that fill o, the queues it
// serves and the command it runs.
func workerFlags(b *binder, o *worker.Options, queues, command *string) {
	b.str(&o.Broker, "broker", "the broker's backend endpoint (several, comma-separated: the one that answers)")
	b.str(queues, "queues", "queues to serve, comma-separated; name:weight gives a weight (default 10)")
	b.integer(&o.Concurrency, "concurrency", "jobs run at once")
	b.str(command, "exec", "the command to run for each job (required)")
	b.duration(&o.Grace, "grace", "time running jobs get to finish at stop")
	b.duration(&o.HeartbeatInterval, "heartbeat-interval", "HEARTBEAT to the broker this often")
	b.duration(&o.HeartbeatTimeout, "heartbeat-timeout", "dial every endpoint again when the broker is silent this long (a paused or frozen broker)")
}

func parseQueues(s string) ([]worker.Queue, error) {
	var qs []worker.Queue
	for _, item := range strings.Split(s, ",") {
		name, weight, hasWeight := strings.Cut(strings.TrimSpace(item), ":")
		if name == "" {
			return nil, fmt.Errorf("queues: %q has an empty queue name", s)
		}
		q := worker.Queue{Name: name, Weight: 10}
		if hasWeight {
			n, err := strconv.Atoi(weight)
			if err != nil {
				return nil, fmt.Errorf("queues: weight %q of %s is not a whole number", weight, name)
			}
			q.Weight = n
		}
		qs = append(qs, q)
	}
	return qs, nil
}
