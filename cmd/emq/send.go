package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
)

func newSendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "send [PAYLOAD | -]",
		Short: "Send a job and print its msgid once the broker has stored it",
		Long: `Send a job to --queue. The payload is the argument, or standard input
with "-" (no argument: an empty payload). Prints the msgid once the broker
has ACKed the job (it is durable then), or with --reply the worker's REPLY.
Exits non-zero with the broker's error when it refuses the job, or when no
answer comes within --wait.

--after ID waits until the job ID (and any other named) is done; it is
stored and ACKed at once, shown as waiting. --batch NAME puts the job in
a batch, and --after-batch NAME waits until that batch is complete (emq
batches). A job waited for that dies or is cancelled cancels this one,
unless --after-failed run.

--priority runs the job before the queue's jobs of a higher number (0 to
65535; 1024 without it). --unique stores the job only if no other job of
the queue holds KEY (pending, delayed, in flight, or done less than
--unique-for ago); otherwise nothing is stored and emq prints
"duplicate: held by job MSGID" to standard error, naming the holder.

Tracing: with TRACEPARENT (and TRACESTATE) in the environment, as a traced
script or an emq worker --exec command has them, the job joins that trace;
with the OTEL_* variables set (OTEL_EXPORTER_OTLP_ENDPOINT, ...) emq send
exports its own span too.

Exit status: 0 the job was stored (and, with --reply, answered); 3 it was
refused as a duplicate of a job holding its --unique key; 1 any other
failure.`,
		Args: cobra.MaximumNArgs(1),
	}
	f := cmd.Flags()
	f.String("broker", broker.DefaultOptions().Frontend, "the broker's frontend endpoint (several, comma-separated: the one that answers)")
	f.String("queue", "default", "queue of the job")
	f.Bool("reply", false, "wait for the worker's REPLY and print it")
	f.StringArray("header", nil, "header item name=value, or a flag name (repeatable)")
	f.Duration("timeout", 0, "the job's timeout (header timeout:N)")
	f.Int("retry-count", -1, "retries after failures (header retry-count:N; -1 = the broker's default)")
	f.Int("priority", -1, "0 to 65535, lower runs first (header priority:N; -1 = none: 1024)")
	f.String("unique", "", "a key no other job of the queue may hold (header unique:KEY)")
	f.Duration("unique-for", 0, "with --unique: how long the key stays held after the job is done (header unique-for:N)")
	f.StringSlice("after", nil, "msgids of jobs this one waits for, comma-separated or repeated (header after)")
	f.String("after-batch", "", "a batch this job waits for (header after-batch)")
	f.String("after-failed", "", "with --after or --after-batch: cancel (the default) or run, when one of them fails")
	f.String("batch", "", "the batch the job joins (header batch)")
	f.Bool("batch-open", false, "with --batch: the batch stays open for more jobs (header batch-open)")
	f.Duration("wait", defaultWait, "how long to wait for the ACK (or the REPLY)")
	addSecurityFlags(f)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		payload, err := readPayload(cmd.InOrStdin(), args)
		if err != nil {
			return err
		}
		var opts []client.Option
		headers, _ := cmd.Flags().GetStringArray("header")
		for _, h := range headers {
			name, value, _ := strings.Cut(h, "=")
			opts = append(opts, client.Header(name, value))
		}
		if d, err := c.duration("timeout"); err != nil {
			return err
		} else if d > 0 {
			opts = append(opts, client.Timeout(d))
		}
		if n, err := c.integer("retry-count"); err != nil {
			return err
		} else if n >= 0 {
			opts = append(opts, client.RetryCount(n))
		}
		if n, err := c.integer("priority"); err != nil {
			return err
		} else if n > math.MaxUint16 || n < -1 {
			return fmt.Errorf("priority: %d: want 0 to 65535", n)
		} else if n >= 0 {
			opts = append(opts, client.Priority(uint16(n)))
		}
		hold, err := c.duration("unique-for")
		if err != nil {
			return err
		}
		switch key := c.str("unique"); {
		case key != "":
			opts = append(opts, client.Unique(key, hold))
		case hold != 0:
			return errors.New("unique-for: goes with --unique KEY")
		}
		if after, _ := cmd.Flags().GetStringSlice("after"); len(after) > 0 {
			opts = append(opts, client.After(after...))
		}
		if v := c.str("after-batch"); v != "" {
			opts = append(opts, client.AfterBatch(v))
		}
		switch v := c.str("after-failed"); v {
		case "":
		case "cancel", "run":
			opts = append(opts, client.AfterFailed(v == "run"))
		default:
			return fmt.Errorf("after-failed: %q: want cancel or run", v)
		}
		if v := c.str("batch"); v != "" {
			opts = append(opts, client.Batch(v, c.v.GetBool("batch-open")))
		} else if c.v.GetBool("batch-open") {
			return errors.New("batch-open: goes with --batch NAME")
		}
		wait, err := c.duration("wait")
		if err != nil {
			return err
		}
		sec, err := securityFrom(c)
		if err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		tp, stopTracing, err := tracerProvider("emq-client", log)
		if err != nil {
			return err
		}
		defer stopTracing()
		cl, err := client.New(client.Options{Broker: c.str("broker"), Security: sec, Logger: log, TracerProvider: tp})
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(traceFromEnv(cmd.Context()), wait)
		defer cancel()
		if c.v.GetBool("reply") {
			reply, err := cl.Request(ctx, c.str("queue"), payload, opts...)
			if err != nil {
				return duplicate(err)
			}
			_, err = cmd.OutOrStdout().Write(reply)
			return err
		}
		id, err := cl.Send(ctx, c.str("queue"), payload, opts...)
		if err != nil {
			return duplicate(err)
		}
		fmt.Fprintln(cmd.OutOrStdout(), id)
		return nil
	}
	return cmd
}

// exitDuplicate is emq send's exit status for a job refused as a
// duplicate (see its help).
const exitDuplicate = 3

// duplicate returns err, unless it is the broker's refusal of a
// duplicate: then an error that says who holds the key and makes main
// exit with exitDuplicate.
func duplicate(err error) error {
	var refused *client.BrokerError
	if !errors.Is(err, client.ErrDuplicate) || !errors.As(err, &refused) {
		return err
	}
	if refused.Holder != "" {
		return exitError{exitDuplicate, fmt.Errorf("duplicate: held by job %s", refused.Holder)}
	}
	return exitError{exitDuplicate, fmt.Errorf("duplicate: %s", refused.Text)} // a broker that did not name it
}

func readPayload(stdin io.Reader, args []string) ([]byte, error) {
	switch {
	case len(args) == 0:
		return nil, nil
	case args[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from standard input: %w", err)
		}
		return b, nil
	}
	return []byte(args[0]), nil
}
