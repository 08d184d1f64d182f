package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/emqp"
)

func newSchedulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "schedules",
		Aliases: []string{"schedule"},
		Short:   "List, show, add, remove, pause and resume the schedules the broker keeps",
	}
	adminFlags(cmd)
	ls := adminCmd("ls", "List schedules, by id", cobra.NoArgs, func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
		var limit int
		var after string
		b := reader()
		pageFlags(b, &limit, &after, "schedules", "id")
		if err := b.apply(c); err != nil {
			return err
		}
		p, err := a.Schedules(cmd.Context(), after, limit)
		if err != nil {
			return err
		}
		return output(cmd, c, p, func(w io.Writer) {
			fmt.Fprintln(w, "ID\tQUEUE\tWHEN\tNEXT\tFIRES\tLEFT\tSTATE\tPREVIEW")
			for _, s := range p.Schedules {
				preview := strconv.Quote(oneLine(s.Preview, 40))
				if s.PayloadHidden {
					preview = "(hidden)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, s.Queue, when(s), s.Next.Format(time.RFC3339),
					s.Fires, left(s), state(s), preview)
			}
			if p.Next != "" {
				fmt.Fprintf(w, "(more: --after %s)\n", p.Next)
			}
		})
	})
	pageFlags(&binder{f: ls.Flags()}, new(100), new(""), "schedules", "id")
	show := adminCmd("show ID", "Show one schedule", cobra.ExactArgs(1), func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
		var withPayload bool
		b := reader()
		payloadFlag(b, &withPayload)
		if err := b.apply(c); err != nil {
			return err
		}
		s, err := a.Schedule(cmd.Context(), args[0], withPayload)
		if err != nil {
			return err
		}
		return output(cmd, c, s, func(w io.Writer) {
			fmt.Fprintf(w, "id\t%s\nqueue\t%s\nheaders\t%s\nwhen\t%s\nstate\t%s\n", s.ID, s.Queue, s.Headers, when(s), state(s))
			fmt.Fprintf(w, "next\t%s\nfires\t%d\nleft\t%s\n", s.Next.Format(time.RFC3339), s.Fires, left(s))
			if !s.LastFire.IsZero() {
				fmt.Fprintf(w, "last fire\t%s\n", s.LastFire.Format(time.RFC3339))
			}
			fmt.Fprintf(w, "created\t%s\npayload size\t%d\n", s.Created.Format(time.RFC3339), s.PayloadSize)
			if s.PayloadHidden {
				fmt.Fprintf(w, "preview\t%s\n", hiddenNote)
			} else {
				fmt.Fprintf(w, "preview\t%q\n", s.Preview)
			}
			if withPayload {
				raw, _ := base64.StdEncoding.DecodeString(s.Payload)
				fmt.Fprintf(w, "payload\t%q\n", raw)
			}
		})
	})
	payloadFlag(&binder{f: show.Flags()}, new(false))
	rm := adminCmd("rm ID", "Remove a schedule (its jobs already made stay)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin.API, _ *config, args []string) error {
			if err := a.RemoveSchedule(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed", args[0])
			return nil
		})
	cmd.AddCommand(ls, show, rm, pauseCmd(true), pauseCmd(false), addScheduleCmd())
	return cmd
}

func pauseCmd(paused bool) *cobra.Command {
	use, short, done := "resume ID", "Resume a schedule (one fire if it missed its time)", "resumed"
	if paused {
		use, short, done = "pause ID", "Pause a schedule: no fires until it is resumed", "paused"
	}
	return adminCmd(use, short, cobra.ExactArgs(1), func(cmd *cobra.Command, a admin.API, _ *config, args []string) error {
		if err := a.PauseSchedule(cmd.Context(), args[0], paused); err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), done, args[0])
		return nil
	})
}

func addScheduleCmd() *cobra.Command {
	cmd := adminCmd("add --queue Q (--every 30s | --cron EXPR) [PAYLOAD | -]", "Add a schedule", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			payload, err := readPayload(cmd.InOrStdin(), args)
			if err != nil {
				return err
			}
			var o scheduleOptions
			b := reader()
			scheduleFlags(b, &o)
			if err := b.apply(c); err != nil {
				return err
			}
			sp := o.spec
			sp.PayloadBase64 = base64.StdEncoding.EncodeToString(payload)
			if o.every != 0 {
				sp.Every = o.every.String()
			}
			if sp.Headers, err = o.headerText(); err != nil {
				return err
			}
			s, err := a.AddSchedule(cmd.Context(), sp)
			if err != nil {
				return err
			}
			return output(cmd, c, s, func(w io.Writer) {
				fmt.Fprintf(w, "schedule %s: queue %s, %s, next %s\n", s.ID, s.Queue, when(s), s.Next.Format(time.RFC3339))
			})
		})
	cmd.Long = `Add a schedule the broker keeps in its journal: a job made on --queue
every --every (whole seconds) or at the times of --cron (5 fields, or a
descriptor such as @hourly; UTC unless --tz). The payload is the argument,
or standard input with "-". The first job is made at once unless
--nohaste. The schedule is named by --id, else by its payload (as
EventMQ names a ["run", {...}] payload) and queue; adding the same
schedule again changes nothing, another one with the same id replaces it.`
	scheduleFlags(&binder{f: cmd.Flags()}, new(scheduleOptions))
	return cmd
}

// scheduleOptions are emq schedules add's flags: the spec's queue and
// cron, and what goes in its headers.
type scheduleOptions struct {
	spec                 admin.ScheduleSpec
	every                time.Duration
	tz, id               string
	noHaste, misfireSkip bool
	runCount             int
	headers              []string
}

// scheduleFlags declares emq schedules add's flags.
func scheduleFlags(b *binder, o *scheduleOptions) {
	b.str(&o.spec.Queue, "queue", "queue of the jobs")
	b.duration(&o.every, "every", "interval between jobs (whole seconds)")
	b.str(&o.spec.Cron, "cron", "cron expression of the jobs' times")
	b.str(&o.tz, "tz", "time zone of --cron (Area/City; header tz)")
	b.str(&o.id, "id", "the schedule's name (header schedule-id)")
	b.boolean(&o.noHaste, "nohaste", "no job at once: the first at the first due time (header nohaste)")
	b.integer(&o.runCount, "run-count", "end after N jobs (header run_count; 0 = no end)")
	b.boolean(&o.misfireSkip, "misfire-skip", "no catch-up job for due times missed while no broker ran (header misfire:skip)")
	b.strArray(&o.headers, "header", "header item name=value, or a flag name (repeatable)")
}

// headerText is the schedule's headers: --header's, then those the
// other flags give.
func (o scheduleOptions) headerText() (string, error) {
	var items []string
	for _, h := range o.headers {
		name, value, ok := strings.Cut(h, "=")
		if ok {
			name += ":" + value
		}
		items = append(items, name)
	}
	for _, f := range [][2]string{{o.id, emqp.HeaderScheduleID}, {o.tz, emqp.HeaderTZ}} { // in one order: the same flags, the same schedule
		if f[0] != "" {
			items = append(items, f[1]+":"+f[0])
		}
	}
	if o.noHaste {
		items = append(items, emqp.HeaderNoHaste)
	}
	if o.misfireSkip {
		items = append(items, emqp.HeaderMisfire+":skip")
	}
	if o.runCount < 0 {
		return "", errors.New("run-count: want 0 (no end) or a number of jobs")
	}
	if o.runCount > 0 {
		items = append(items, emqp.HeaderRunCount+":"+strconv.Itoa(o.runCount))
	}
	return strings.Join(items, ","), nil
}

func when(s admin.ScheduleInfo) string {
	if s.Cron != "" {
		return "cron " + s.Cron
	}
	return "every " + s.Every
}

func left(s admin.ScheduleInfo) string {
	if s.Left < 0 {
		return "-"
	}
	return strconv.Itoa(s.Left)
}

func state(s admin.ScheduleInfo) string {
	if s.Paused {
		return "paused"
	}
	return "active"
}
