package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
)

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, show, delete and purge stored jobs"}
	adminFlags(cmd)
	cmd.AddCommand(listCmd("ls", "List jobs", ""), showCmd(), removeCmd())

	purge := adminCmd("purge --queue Q --yes", "Delete every pending job of a queue", cobra.NoArgs,
		func(cmd *cobra.Command, a admin, c *config, _ []string) error {
			q := c.str("queue")
			if q == "" {
				return errors.New("queue: name the queue to purge with --queue")
			}
			if !c.v.GetBool("yes") {
				return fmt.Errorf("purging deletes every pending job of queue %q; add --yes to do it", q)
			}
			n, err := a.Purge(q)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d jobs from %s\n", n, q)
			return nil
		})
	purge.Flags().String("queue", "", "the queue to purge")
	purge.Flags().Bool("yes", false, "confirm")
	cmd.AddCommand(purge)
	return cmd
}

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "The dead letters: jobs out of attempts"}
	adminFlags(cmd)
	retry := adminCmd("retry MSGID|--all", "Put dead jobs back in their queues", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, a admin, c *config, args []string) error {
			all := c.v.GetBool("all")
			if all == (len(args) == 1) {
				return errors.New("name one MSGID, or --all")
			}
			ids := args
			if all {
				var err error
				if ids, err = allJobs(a, c.str("queue"), "dead"); err != nil {
					return err
				}
			}
			for _, id := range ids {
				if err := a.Retry(id); err != nil {
					return err // the journal's error names the msgid
				}
				fmt.Fprintln(cmd.OutOrStdout(), "retried", id)
			}
			return nil
		})
	retry.Flags().Bool("all", false, "retry every dead job (of --queue, if given)")
	retry.Flags().String("queue", "", "with --all: only this queue")
	cmd.AddCommand(listCmd("ls", "List dead jobs", "dead"), retry, removeCmd())
	return cmd
}

// allJobs pages through every job of queue in state.
func allJobs(a admin, queue, state string) ([]string, error) {
	var ids []string
	after := ""
	for {
		p, err := a.Jobs(queue, state, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, j := range p.Jobs {
			ids = append(ids, j.MsgID)
		}
		if after = p.Next; after == "" {
			return ids, nil
		}
	}
}

func listCmd(use, short, state string) *cobra.Command {
	cmd := adminCmd(use, short, cobra.NoArgs, func(cmd *cobra.Command, a admin, c *config, _ []string) error {
		st := state
		if st == "" {
			st = c.str("state")
		}
		limit, err := c.integer("limit")
		if err != nil {
			return err
		}
		p, err := a.Jobs(c.str("queue"), st, c.str("after"), limit)
		if err != nil {
			return err
		}
		return output(cmd, c, p, func(w io.Writer) {
			fmt.Fprintln(w, "MSGID\tQUEUE\tSTATE\tATTEMPTS\tAGE\tSIZE\tLAST ERROR")
			for _, j := range p.Jobs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\n", j.MsgID, j.Queue, j.State, j.Attempts,
					time.Since(j.Enqueued).Round(time.Second), j.PayloadSize, oneLine(j.LastError, 60))
			}
			if p.Next != "" {
				fmt.Fprintf(w, "(more: --after %s)\n", p.Next)
			}
		})
	})
	f := cmd.Flags()
	f.String("queue", "", "only this queue")
	if state == "" {
		f.String("state", "", "pending, inflight or dead (default: all)")
	}
	f.Int("limit", 100, "jobs to show")
	f.String("after", "", "continue a listing (the cursor it printed)")
	return cmd
}

func showCmd() *cobra.Command {
	cmd := adminCmd("show MSGID", "Show one job", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin, c *config, args []string) error {
			withPayload := c.v.GetBool("payload")
			j, err := a.Job(args[0], withPayload)
			if err != nil {
				return err
			}
			return output(cmd, c, j, func(w io.Writer) {
				printJob(w, j)
				if withPayload {
					raw, _ := base64.StdEncoding.DecodeString(j.Payload)
					fmt.Fprintf(w, "payload\t%q\n", raw)
				}
			})
		})
	cmd.Flags().Bool("payload", false, "include the whole payload")
	return cmd
}

func printJob(w io.Writer, j broker.JobInfo) {
	fmt.Fprintf(w, "msgid\t%s\nqueue\t%s\nstate\t%s\n", j.MsgID, j.Queue, j.State)
	if j.Worker != "" {
		fmt.Fprintf(w, "worker\t%s\n", j.Worker)
	}
	fmt.Fprintf(w, "headers\t%s\nenqueued\t%s\nattempts\t%d\n", j.Headers, j.Enqueued.Format(time.RFC3339), j.Attempts)
	if j.LastError != "" {
		fmt.Fprintf(w, "last error\t%s\n", oneLine(j.LastError, 500))
	}
	if !j.NotBefore.IsZero() {
		fmt.Fprintf(w, "not before\t%s\n", j.NotBefore.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "payload size\t%d\npreview\t%q\n", j.PayloadSize, j.Preview)
}

func removeCmd() *cobra.Command {
	return adminCmd("rm MSGID", "Delete a job", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin, _ *config, args []string) error {
			if err := a.Remove(args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed", args[0])
			return nil
		})
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
