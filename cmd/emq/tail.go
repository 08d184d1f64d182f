package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
)

// newTailCmd follows a running broker's event stream (GET /api/v1/events).
func newTailCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tail [--queue Q] [--msgid ID]",
		Short: "Print a running broker's events as they happen: jobs, workers, queue controls",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, c, err := openAdmin(cmd)
			if err != nil {
				return err
			}
			defer a.Close()
			var o tailOptions
			b := reader()
			tailFlags(b, &o)
			jsonFlag(b, &o.asJSON, "")
			if err := b.apply(c); err != nil {
				return err
			}
			events, err := a.Events(cmd.Context(), o.queue, o.msgid)
			if err != nil {
				return err
			}
			defer events.Close()
			return printEvents(cmd.Context(), cmd.OutOrStdout(), events, o.asJSON, o.count)
		},
	}
	adminFlags(cmd)
	tailFlags(&binder{f: cmd.Flags()}, new(tailOptions))
	return cmd
}

// tailOptions are emq tail's flags, and the admin commands' --json.
type tailOptions struct {
	queue, msgid string
	count        int
	asJSON       bool
}

// tailFlags declares emq tail's own flags.
func tailFlags(b *binder, o *tailOptions) {
	b.str(&o.queue, "queue", "only the events of this queue")
	b.str(&o.msgid, "msgid", "only the events of this job")
	b.integer(&o.count, "count", "stop after this many events (0 = follow until stopped)")
}

// printEvents prints the events of a stream, a line each, until it
// ends, or after count (if not 0). A stream that ends is an error.
func printEvents(ctx context.Context, w io.Writer, events admin.Events, asJSON bool, count int) error {
	for n := 0; ; {
		batch, err := events.Next(ctx)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if asJSON {
				js, _ := json.Marshal(e)
				fmt.Fprintln(w, string(js))
			} else {
				fmt.Fprintln(w, eventLine(e))
			}
			if n++; count > 0 && n >= count {
				return nil
			}
		}
	}
}

// eventLine is an event in one line: time, kind, then what it has.
func eventLine(e broker.Event) string {
	parts := []string{e.Time.Format(time.RFC3339Nano), e.Kind}
	for _, kv := range [][2]string{{"queue", e.Queue}, {"msgid", e.MsgID}, {"worker", e.Worker}, {"reason", e.Reason}, {"by", e.By}, {"from", e.From}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+fmt.Sprintf("%q", kv[1]))
		}
	}
	if e.Attempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt=%d", e.Attempt))
	}
	if e.Controls != nil {
		parts = append(parts, "controls="+controls(broker.QueueInfo{}.WithControls(*e.Controls)))
	}
	return strings.Join(parts, " ")
}
