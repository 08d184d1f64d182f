package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
)

func newBatchesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "batches",
		Aliases: []string{"batch"},
		Short:   "List and show batches of jobs; open and close them",
		Long: `A batch is the jobs sent with the header batch:NAME. A job with
after-batch:NAME waits for the whole batch: it runs once the batch is
complete, that is closed with no job of it waiting or pending. A batch is
closed from its first job unless it was opened (emq batches open, or a
job with the header batch-open): open, more jobs may come (jobs running
in it may add to it), and it completes only once closed.`,
	}
	adminFlags(cmd)
	ls := adminCmd("ls", "List batches, by name", cobra.NoArgs, func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
		var limit int
		var after string
		b := reader()
		pageFlags(b, &limit, &after, "batches", "name")
		if err := b.apply(c); err != nil {
			return err
		}
		p, err := a.Batches(cmd.Context(), after, limit)
		if err != nil {
			return err
		}
		return output(cmd, c, p, func(w io.Writer) {
			fmt.Fprintln(w, "NAME\tSTATE\tWAITING\tPENDING\tDONE\tDEAD\tCANCELLED\tREMOVED\tWAITERS\tCREATED")
			for _, b := range p.Batches {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", b.Name, b.State, b.Waiting, b.Pending, b.Done, b.Dead,
					b.Cancelled, b.Removed, b.Waiters, b.Created.Format(time.RFC3339))
			}
			if p.Next != "" {
				fmt.Fprintf(w, "(more: --after %s)\n", p.Next)
			}
		})
	})
	pageFlags(&binder{f: ls.Flags()}, new(100), new(""), "batches", "name")
	show := adminCmd("show NAME", "Show one batch and its counts", cobra.ExactArgs(1), func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
		b, err := a.Batch(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		return output(cmd, c, b, func(w io.Writer) { printBatch(w, b) })
	})
	open := batchCmd(true)
	closeCmd := batchCmd(false)
	cmd.AddCommand(ls, show, open, closeCmd)
	return cmd
}

func printBatch(w io.Writer, b admin.BatchInfo) {
	fmt.Fprintf(w, "name\t%s\nstate\t%s\n", b.Name, b.State)
	fmt.Fprintf(w, "waiting\t%d\npending\t%d (in flight %d)\ndone\t%d\ndead\t%d\ncancelled\t%d\nremoved\t%d\n",
		b.Waiting, b.Pending, b.InFlight, b.Done, b.Dead, b.Cancelled, b.Removed)
	fmt.Fprintf(w, "waiters\t%d\ncreated\t%s\n", b.Waiters, b.Created.Format(time.RFC3339))
	if !b.Completed.IsZero() {
		fmt.Fprintf(w, "completed\t%s\n", b.Completed.Format(time.RFC3339))
	}
}

func batchCmd(open bool) *cobra.Command {
	use, short := "close NAME", "Close a batch: complete once nothing of it is left to run (then what waits for it runs)"
	if open {
		use, short = "open NAME", "Open a batch (made if it is not known): more jobs may join; it completes only once closed"
	}
	return adminCmd(use, short, cobra.ExactArgs(1), func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
		b, err := a.OpenBatch(cmd.Context(), args[0], open)
		if err != nil {
			return err
		}
		return output(cmd, c, b, func(w io.Writer) { printBatch(w, b) })
	})
}
