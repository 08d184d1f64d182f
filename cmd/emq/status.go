package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// jsonFlag declares --json.
func jsonFlag(b *binder, on *bool, usage string) {
	b.boolean(on, "json", usage)
}

// output prints v as JSON with --json, else calls table with a tabwriter.
func output(cmd *cobra.Command, c *config, v any, table func(w io.Writer)) error {
	var asJSON bool
	b := reader()
	jsonFlag(b, &asJSON, "")
	if err := b.apply(c); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// adminCmd makes a command that opens the admin (online or offline) and
// runs fn with it.
func adminCmd(use, short string, args cobra.PositionalArgs, fn func(cmd *cobra.Command, a admin.API, c *config, args []string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, c, err := openAdmin(cmd)
			if err != nil {
				return err
			}
			defer a.Close()
			return fn(cmd, a, c, args)
		},
	}
}

func newStatsCmd() *cobra.Command {
	cmd := adminCmd("stats", "Counters of a running broker, and jobs per queue", cobra.NoArgs,
		func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
			var s *admin.StatsInfo // nil offline: no counters
			switch st, err := a.Stats(cmd.Context()); {
			case err == nil:
				s = &st
			case !errors.Is(err, admin.ErrNeedsBroker):
				return err
			}
			qs, err := a.Queues(cmd.Context())
			if err != nil {
				return err
			}
			return output(cmd, c, map[string]any{"counters": s, "queues": qs}, func(w io.Writer) {
				if s != nil { // the names and order of the stats API and /metrics
					for _, c := range s.Counters {
						fmt.Fprintf(w, "%s\t%d\n", c.Name, c.Value)
					}
					for _, e := range s.Errors {
						fmt.Fprintf(w, "%s %s\t%d\n", broker.ErrorsName, e.Name, e.Value)
					}
					if s.Rekey != nil {
						fmt.Fprintf(w, "rekey\t%s\n", s.Rekey)
					}
				}
				pending, dead, done := 0, 0, 0
				for _, q := range qs {
					pending, dead, done = pending+q.Pending+q.Delayed+q.InFlight, dead+q.Dead, done+q.Done
				}
				fmt.Fprintf(w, "queues\t%d\njobs stored\t%d\ndead letters\t%d\ndone, kept\t%d\n", len(qs), pending, dead, done)
			})
		})
	adminFlags(cmd)
	return cmd
}

func newQueuesCmd() *cobra.Command {
	cmd := adminCmd("queues", "Queues: jobs waiting, in flight, dead, workers, oldest job, controls", cobra.NoArgs,
		func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
			qs, err := a.Queues(cmd.Context())
			if err != nil {
				return err
			}
			return output(cmd, c, qs, func(w io.Writer) {
				fmt.Fprintln(w, "QUEUE\tPENDING\tDELAYED\tIN FLIGHT\tDEAD\tDONE\tWORKERS\tOLDEST\tCONTROLS")
				for _, q := range qs {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", q.Name, q.Pending, q.Delayed, q.InFlight, q.Dead, q.Done,
						q.Workers, time.Duration(q.OldestAge*float64(time.Second)).Round(time.Millisecond), controls(q))
				}
			})
		})
	adminFlags(cmd)
	cmd.AddCommand(pauseQueueCmd(true), pauseQueueCmd(false), setQueueCmd(), placeQueueCmd())
	return cmd
}

// controls says a queue's controls in a few words ("-" for none).
func controls(q broker.QueueInfo) string {
	var parts []string
	if q.Paused {
		parts = append(parts, "paused")
	}
	if q.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", q.Concurrency))
	}
	if q.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %g/s burst %d", q.Rate, max(1, q.Burst)))
	}
	if q.TenantConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("each tenant concurrency %d", q.TenantConcurrency))
	}
	if q.TenantRate > 0 {
		parts = append(parts, fmt.Sprintf("each tenant rate %g/s burst %d", q.TenantRate, max(1, q.TenantBurst)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func pauseQueueCmd(paused bool) *cobra.Command {
	use, short, done := "resume QUEUE", "Resume a queue: its jobs are dispatched again, in order", "resumed"
	if paused {
		use, short, done = "pause QUEUE", "Pause a queue: it still takes and stores jobs, and dispatches none", "paused"
	}
	return adminCmd(use, short, cobra.ExactArgs(1), func(cmd *cobra.Command, a admin.API, _ *config, args []string) error {
		if _, err := a.ChangeQueue(cmd.Context(), args[0], broker.QueueChange{Paused: &paused}); err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), done, args[0])
		return nil
	})
}

func setQueueCmd() *cobra.Command {
	cmd := adminCmd("set QUEUE [--concurrency N] [--rate R] [--burst B] [--tenant-concurrency N] [--tenant-rate R] [--tenant-burst B]",
		"Limit a queue, and each of its tenants by default: jobs in flight across every worker, dispatches a second (0 = no limit)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var ch broker.QueueChange
			b := reader()
			queueChangeFlags(b, &ch)
			if err := b.apply(c); err != nil {
				return err
			}
			if ch == (broker.QueueChange{}) {
				return errors.New("say what to set: --concurrency, --rate, --burst, --tenant-concurrency, --tenant-rate or --tenant-burst")
			}
			if err := ch.Apply(store.QueueSettings{}).Validate(); err != nil { // before it travels as JSON (NaN cannot)
				return err
			}
			q, err := a.ChangeQueue(cmd.Context(), args[0], ch)
			if err != nil {
				return err
			}
			return output(cmd, c, q, func(w io.Writer) { fmt.Fprintf(w, "%s\t%s\n", q.Name, controls(q)) })
		})
	queueChangeFlags(&binder{f: cmd.Flags()}, new(broker.QueueChange))
	return cmd
}

// queueChangeFlags declares emq queues set's flags: each changes its
// control only when given.
func queueChangeFlags(b *binder, ch *broker.QueueChange) {
	b.optInt(&ch.Concurrency, "concurrency", "jobs of the queue in flight at most, across every worker (0 = no limit)")
	b.optNumber(&ch.Rate, "rate", "dispatches of the queue a second at most (0 = no limit)")
	b.optInt(&ch.Burst, "burst", "dispatches at once after a quiet while, above the rate (0 = 1)")
	b.optInt(&ch.TenantConcurrency, "tenant-concurrency", "each tenant's jobs in flight at most, unless set for the tenant (emq tenants set; 0 = no limit)")
	b.optNumber(&ch.TenantRate, "tenant-rate", "each tenant's dispatches a second at most, unless set for the tenant (0 = no limit)")
	b.optInt(&ch.TenantBurst, "tenant-burst", "each tenant's dispatches at once above its rate, unless set for the tenant (0 = 1)")
}

func newWorkersCmd() *cobra.Command {
	cmd := adminCmd("workers", "Workers of a running broker", cobra.NoArgs,
		func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
			ws, err := a.Workers(cmd.Context())
			if err != nil {
				return err
			}
			return output(cmd, c, ws, func(w io.Writer) {
				fmt.Fprintln(w, "WORKER\tQUEUES\tFREE SLOTS\tIN FLIGHT\tLAST HEARD")
				for _, wk := range ws {
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s ago\n", wk.ID, strings.Join(wk.Queues, ","), wk.FreeSlots,
						wk.InFlight, time.Since(wk.LastHeartbeat).Round(time.Millisecond))
				}
			})
		})
	adminFlags(cmd)
	return cmd
}
