package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
)

// output prints v as JSON with --json, else calls table with a tabwriter.
func output(cmd *cobra.Command, c *config, v any, table func(w io.Writer)) error {
	out := cmd.OutOrStdout()
	if c.v.GetBool("json") {
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
func adminCmd(use, short string, args cobra.PositionalArgs, fn func(cmd *cobra.Command, a admin, c *config, args []string) error) *cobra.Command {
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
		func(cmd *cobra.Command, a admin, c *config, _ []string) error {
			s, qs, err := a.Stats()
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
				}
				pending, dead := 0, 0
				for _, q := range qs {
					pending, dead = pending+q.Pending+q.Delayed+q.InFlight, dead+q.Dead
				}
				fmt.Fprintf(w, "queues\t%d\njobs stored\t%d\ndead letters\t%d\n", len(qs), pending, dead)
			})
		})
	adminFlags(cmd)
	return cmd
}

func newQueuesCmd() *cobra.Command {
	cmd := adminCmd("queues", "Queues: jobs waiting, in flight, dead, workers, oldest job", cobra.NoArgs,
		func(cmd *cobra.Command, a admin, c *config, _ []string) error {
			qs, err := a.Queues()
			if err != nil {
				return err
			}
			return output(cmd, c, qs, func(w io.Writer) {
				fmt.Fprintln(w, "QUEUE\tPENDING\tDELAYED\tIN FLIGHT\tDEAD\tWORKERS\tOLDEST")
				for _, q := range qs {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Name, q.Pending, q.Delayed, q.InFlight, q.Dead,
						q.Workers, time.Duration(q.OldestAge*float64(time.Second)).Round(time.Millisecond))
				}
			})
		})
	adminFlags(cmd)
	return cmd
}

func newWorkersCmd() *cobra.Command {
	cmd := adminCmd("workers", "Workers of a running broker", cobra.NoArgs,
		func(cmd *cobra.Command, a admin, c *config, _ []string) error {
			ws, err := a.Workers()
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
