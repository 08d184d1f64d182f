package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "jobs", Short: "List, show, cancel, delete and purge stored jobs"}
	adminFlags(cmd)
	cmd.AddCommand(listCmd("ls", "List jobs", ""), showCmd(), whyCmd(), removeCmd(), cancelCmd())

	purge := adminCmd("purge --queue Q --yes", "Delete every pending job of a queue", cobra.NoArgs,
		func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
			var q string
			var yes bool
			b := reader()
			purgeFlags(b, &q, &yes)
			if err := b.apply(c); err != nil {
				return err
			}
			if q == "" {
				return errors.New("queue: name the queue to purge with --queue")
			}
			if !yes {
				return fmt.Errorf("purging deletes every pending job of queue %q; add --yes to do it", q)
			}
			n, err := a.PurgeQueue(cmd.Context(), q)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d jobs from %s\n", n, q)
			return nil
		})
	purgeFlags(&binder{f: purge.Flags()}, new(string), new(false))
	cmd.AddCommand(purge)
	return cmd
}

// purgeFlags declares emq jobs purge's flags.
func purgeFlags(b *binder, queue *string, yes *bool) {
	b.str(queue, "queue", "the queue to purge")
	b.boolean(yes, "yes", "confirm")
}

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "The dead letters: jobs out of attempts"}
	adminFlags(cmd)
	cmd.AddCommand(listCmd("ls", "List dead jobs", "dead"), bulkCmd(false), bulkCmd(true))
	return cmd
}

// bulkCmd is dlq retry or dlq rm: one MSGID, or every dead job that
// --all or the filter flags match, which it counts and acts on with --yes.
func bulkCmd(remove bool) *cobra.Command {
	use, short, did, verb := "retry MSGID | --all | FILTERS", "Put dead jobs back in their queues", "retried", "retry"
	if remove {
		use, short, did, verb = "rm MSGID | --all | FILTERS", "Delete dead jobs", "removed", "remove"
	}
	cmd := adminCmd(use, short, cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var o bulkOptions
			b := reader()
			bulkFlags(b, &o, "", false)
			if err := b.apply(c); err != nil {
				return err
			}
			f, err := o.filter.parse("dead")
			if err != nil {
				return err
			}
			bulk := o.all || f != (admin.JobFilter{State: "dead"})
			if bulk == (len(args) == 1) {
				return errors.New("name one MSGID, or --all, or filters (--queue, --error, --header, --msgid-prefix, --older-than, --newer-than)")
			}
			out := cmd.OutOrStdout()
			if !bulk {
				if remove {
					err = a.RemoveJob(cmd.Context(), args[0])
				} else {
					err = a.RetryJob(cmd.Context(), args[0])
				}
				if err == nil {
					fmt.Fprintln(out, did, args[0])
				}
				return err
			}
			yes := o.yes
			res, err := a.BulkDead(cmd.Context(), f, remove, yes)
			switch {
			case err != nil && res.Done > 0:
				return fmt.Errorf("%w (%s %d of %d matching dead jobs before it)", err, did, res.Done, res.Matched)
			case err != nil:
				return err
			}
			if !yes {
				fmt.Fprintf(out, "%d dead jobs match; add --yes to %s them\n", res.Matched, verb)
				return nil
			}
			fmt.Fprintf(out, "%s %d of %d matching dead jobs\n", did, res.Done, res.Matched)
			return nil
		})
	bulkFlags(&binder{f: cmd.Flags()}, new(bulkOptions), "every dead job (of --queue, if given)", false)
	return cmd
}

// bulkOptions are the flags of a command that acts on one job or on
// every job that matches.
type bulkOptions struct {
	all, inflight, yes bool
	filter             jobFilter
}

// bulkFlags declares the flags of dlq retry and dlq rm, or with cancel
// those of jobs cancel; all is --all's help.
func bulkFlags(b *binder, o *bulkOptions, all string, cancel bool) {
	b.boolean(&o.all, "all", all)
	if cancel {
		b.boolean(&o.inflight, "inflight", "only jobs in flight (a running broker's)")
	}
	b.boolean(&o.yes, "yes", "act on what matches (without it: count only)")
	filterFlags(b, &o.filter, false)
}

// cancelCmd is jobs cancel: one MSGID, or every pending, delayed and
// in-flight job that --all or the filter flags match, which it counts
// and cancels with --yes.
func cancelCmd() *cobra.Command {
	cmd := adminCmd("cancel MSGID | --all | FILTERS", "Cancel jobs: pending and delayed ones never run, workers running one are told to stop", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var o bulkOptions
			b := reader()
			bulkFlags(b, &o, "", true)
			if err := b.apply(c); err != nil {
				return err
			}
			state := "pending"
			if o.inflight {
				state = "inflight"
			}
			f, err := o.filter.parse(state)
			if err != nil {
				return err
			}
			bulk := o.all || f != (admin.JobFilter{State: "pending"})
			if bulk == (len(args) == 1) {
				return errors.New("name one MSGID, or --all, or filters (--queue, --inflight, --error, --header, --msgid-prefix, --older-than, --newer-than)")
			}
			if !bulk {
				j, err := a.CancelJob(cmd.Context(), args[0])
				if err != nil {
					return fmt.Errorf("cancel: %w", err)
				}
				return output(cmd, c, j, func(w io.Writer) { printJob(w, j) })
			}
			yes := o.yes
			res, err := a.BulkCancel(cmd.Context(), f, yes)
			switch {
			case err != nil && res.Done > 0:
				return fmt.Errorf("%w (cancelled %d of %d matching jobs before it)", err, res.Done, res.Matched)
			case err != nil:
				return err
			}
			return output(cmd, c, res, func(w io.Writer) {
				if !yes {
					fmt.Fprintf(w, "%d jobs match; add --yes to cancel them\n", res.Matched)
					return
				}
				fmt.Fprintf(w, "cancelled %d of %d matching jobs\n", res.Done, res.Matched)
			})
		})
	cmd.Long = `Cancel a job by its MSGID, or every job --all or the filters match: a
pending or delayed job leaves its queue and never runs; the worker running
one in flight is sent CANCEL, and what it answers is ignored. A broker
with retain-done keeps cancelled jobs as long as done ones (emq jobs ls
--state cancelled); offline (--data-dir) they are deleted. A job done,
dead or cancelled already is refused. In bulk, without --yes it only
counts what matches.`
	bulkFlags(&binder{f: cmd.Flags()}, new(bulkOptions), "every pending, delayed and in-flight job (of --queue, if given)", true)
	return cmd
}

// jobFilter is the filter flags as given, read by the API's own parser.
type jobFilter struct {
	state, queue, msgidPrefix, header, errorText, olderThan, newerThan string
}

// filterFlags declares a listing's filters, and --state with withState.
func filterFlags(b *binder, f *jobFilter, withState bool) {
	if withState {
		b.str(&f.state, "state", "waiting, pending, inflight, dead, done or cancelled (default: waiting, pending and dead)")
	}
	b.str(&f.queue, "queue", "only this queue")
	b.str(&f.msgidPrefix, "msgid-prefix", "only msgids that start with this")
	b.str(&f.header, "header", `only jobs with this header item: "key" or "key:value"`)
	b.str(&f.errorText, "error", "only jobs whose last error contains this")
	b.str(&f.olderThan, "older-than", "only jobs stored at least this long ago (90s, 2h)")
	b.str(&f.newerThan, "newer-than", "only jobs stored at most this long ago")
}

// parse is f's filter of jobs in state (f's --state when state is "").
func (f jobFilter) parse(state string) (admin.JobFilter, error) {
	if state == "" {
		state = f.state
	}
	q := url.Values{"state": {state}}
	for param, v := range map[string]string{"queue": f.queue, "msgid_prefix": f.msgidPrefix, "header": f.header,
		"error": f.errorText, "older_than": f.olderThan, "newer_than": f.newerThan} {
		if v != "" {
			q.Set(param, v)
		}
	}
	jf, err := admin.ParseJobFilter(q)
	if err != nil {
		return jf, fmt.Errorf("%s (flags --state, --older-than, --newer-than)", err)
	}
	return jf, nil
}

func listCmd(use, short, state string) *cobra.Command {
	cmd := adminCmd(use, short, cobra.NoArgs, func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
		var o listOptions
		b := reader()
		listFlags(b, &o, state == "")
		if err := b.apply(c); err != nil {
			return err
		}
		f, err := o.filter.parse(state)
		if err != nil {
			return err
		}
		f.Limit, f.After = o.limit, o.after
		p, err := a.Jobs(cmd.Context(), f)
		if err != nil {
			return err
		}
		return output(cmd, c, p, func(w io.Writer) {
			fmt.Fprintln(w, "MSGID\tQUEUE\tSTATE\tPRIORITY\tATTEMPTS\tAGE\tSIZE\tLAST ERROR")
			for _, j := range p.Jobs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\n", j.MsgID, j.Queue, j.State, j.Priority, j.Attempts,
					time.Since(j.Enqueued).Round(time.Second), j.PayloadSize, oneLine(j.LastError, 60))
			}
			if p.Next != "" {
				fmt.Fprintf(w, "(more: --after %s)\n", p.Next)
			}
		})
	})
	listFlags(&binder{f: cmd.Flags()}, &listOptions{limit: 100}, state == "")
	return cmd
}

// listOptions are a listing's flags.
type listOptions struct {
	filter jobFilter
	limit  int
	after  string
}

// listFlags declares a listing's flags, and --state with withState.
func listFlags(b *binder, o *listOptions, withState bool) {
	filterFlags(b, &o.filter, withState)
	pageFlags(b, &o.limit, &o.after, "jobs", "cursor")
}

// pageFlags declares a listing's --limit and --after: at most limit
// items a page, after the cursor a page printed.
func pageFlags(b *binder, limit *int, after *string, items, cursor string) {
	b.integer(limit, "limit", items+" to show")
	b.str(after, "after", "continue a listing (the "+cursor+" it printed)")
}

// hiddenNote stands for a preview the broker does not show this token.
const hiddenNote = "(hidden: payloads are shown to the full admin token; docs/security.md)"

func showCmd() *cobra.Command {
	cmd := adminCmd("show MSGID", "Show one job", msgidArg,
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var withPayload bool
			b := reader()
			payloadFlag(b, &withPayload)
			if err := b.apply(c); err != nil {
				return err
			}
			j, err := a.Job(cmd.Context(), args[0], withPayload)
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("%w (a done job is kept only while the broker runs with --retain-done)", err)
			}
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
	payloadFlag(&binder{f: cmd.Flags()}, new(false))
	return cmd
}

// payloadFlag declares --payload of a command that shows one job or
// schedule.
func payloadFlag(b *binder, on *bool) {
	b.boolean(on, "payload", "include the whole payload")
}

func whyCmd() *cobra.Command {
	return adminCmd("why MSGID", "Say why a job is where it is: one sentence, then its parts (a running broker's)", msgidArg,
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			y, err := a.Why(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return output(cmd, c, y, func(w io.Writer) {
				fmt.Fprintln(w, y.Sentence)
				row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
				row("reason", y.Reason)
				row("state", y.State)
				row("queue", y.Queue)
				if y.Tenant != "" {
					row("tenant", y.Tenant)
				}
				for _, t := range []struct {
					k string
					t time.Time
				}{{"until", y.Until}, {"since", y.Since}, {"deadline", y.Deadline}, {"last worker", y.LastWorker}} {
					if !t.t.IsZero() {
						row(t.k, t.t.UTC().Format(time.RFC3339))
					}
				}
				if y.Worker != "" {
					row("worker", fmt.Sprintf("%s (attempt %d)", y.Worker, y.Attempt))
				}
				if y.Overdue {
					row("overdue", "yes")
				}
				if y.Limiter != "" {
					row("limiter", y.Limiter)
				}
				if len(y.Holding) > 0 {
					row("held by", strings.Join(y.Holding, ", "))
				}
				for _, p := range y.Parents {
					row("waits for", p.MsgID+" "+p.State)
				}
				if y.Batch != "" {
					row("batch", y.Batch)
				}
				if a := y.Ahead; a != nil {
					row("ahead", fmt.Sprintf("%d of a higher priority, %d of its tenant, about %d in other tenants' turns", a.Priority, a.Tenant, a.Turns))
				}
				if y.Error != "" {
					row("error", y.Error)
				}
			})
		})
}

// msgidArg takes one argument, a msgid: not empty.
func msgidArg(cmd *cobra.Command, args []string) error {
	if err := cobra.ExactArgs(1)(cmd, args); err != nil {
		return err
	}
	if args[0] == "" {
		return errors.New("a msgid is needed, not an empty one (emq jobs ls lists them)")
	}
	return nil
}

func printJob(w io.Writer, j admin.JobInfo) {
	fmt.Fprintf(w, "msgid\t%s\nqueue\t%s\nstate\t%s\n", j.MsgID, j.Queue, j.State)
	if j.Worker != "" {
		fmt.Fprintf(w, "worker\t%s\n", j.Worker)
	}
	fmt.Fprintf(w, "headers\t%s\npriority\t%d\n", j.Headers, j.Priority)
	if j.Unique != "" {
		hold := ""
		if j.UniqueFor > 0 {
			hold = fmt.Sprintf(" (held %s after it is done)", time.Duration(j.UniqueFor)*time.Second)
		}
		fmt.Fprintf(w, "unique key\t%s%s\n", j.Unique, hold)
	}
	if p := j.Progress; p != nil {
		fmt.Fprintf(w, "progress\t%s\n", progressLine(*p))
	}
	printFamily(w, j)
	// Attempts counts the deliveries that ended without a REPLY, as the
	// retry count does; the trail numbers every delivery.
	fmt.Fprintf(w, "enqueued\t%s\nfailed attempts\t%d\n", j.Enqueued.Format(time.RFC3339), j.Attempts)
	if j.LastError != "" {
		fmt.Fprintf(w, "last error\t%s\n", oneLine(j.LastError, 500))
	}
	if !j.NotBefore.IsZero() {
		fmt.Fprintf(w, "not before\t%s\n", j.NotBefore.Format(time.RFC3339))
	}
	if !j.Finished.IsZero() {
		fmt.Fprintf(w, "finished\t%s\n", j.Finished.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "payload size\t%d\n", j.PayloadSize)
	if j.PayloadHidden {
		fmt.Fprintf(w, "preview\t%s\n", hiddenNote)
	} else {
		fmt.Fprintf(w, "preview\t%q\n", j.Preview)
	}
	if j.Result != nil {
		raw, _ := base64.StdEncoding.DecodeString(*j.Result)
		fmt.Fprintf(w, "result\t%q\n", raw)
	}
	for i, e := range j.Trail {
		label := ""
		if i == 0 {
			label = "trail"
		}
		fmt.Fprintf(w, "%s\t%s\n", label, eventLine(broker.Event{Time: e.Time, Kind: e.Kind, Worker: e.Worker, Attempt: e.Attempt, Reason: e.Reason}))
	}
}

// progressLine is a worker's latest report: "40% resizing (3s ago)".
func progressLine(p broker.Progress) string {
	var parts []string
	if p.Percent >= 0 {
		parts = append(parts, fmt.Sprintf("%d%%", p.Percent))
	}
	if p.Note != "" {
		parts = append(parts, oneLine(p.Note, 200))
	}
	parts = append(parts, fmt.Sprintf("(%s ago)", time.Since(p.Time).Round(time.Second)))
	return strings.Join(parts, " ")
}

func removeCmd() *cobra.Command {
	return adminCmd("rm MSGID", "Delete a job", msgidArg,
		func(cmd *cobra.Command, a admin.API, _ *config, args []string) error {
			if err := a.RemoveJob(cmd.Context(), args[0]); err != nil {
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

// printFamily prints a job's workflow: its batch, what it waits for (with
// their states) and the jobs that wait for it.
func printFamily(w io.Writer, j admin.JobInfo) {
	if j.Batch != "" {
		fmt.Fprintf(w, "batch\t%s\n", j.Batch)
	}
	for i, p := range j.After {
		label := ""
		if i == 0 {
			label = "after"
		}
		state := p.State
		if state == "" {
			state = "done (not kept)"
		}
		fmt.Fprintf(w, "%s\t%s (%s)\n", label, p.MsgID, state)
	}
	if j.AfterBatch != "" {
		fmt.Fprintf(w, "after batch\t%s\n", j.AfterBatch)
	}
	if j.AfterFailed != "" {
		fmt.Fprintf(w, "after failed\t%s\n", j.AfterFailed)
	}
	if j.State == "waiting" {
		fmt.Fprintf(w, "waits for\t%d more\n", j.Waits)
	}
	for i, c := range j.Children {
		label := ""
		if i == 0 {
			label = "waited for by"
		}
		fmt.Fprintf(w, "%s\t%s\n", label, c)
	}
}
