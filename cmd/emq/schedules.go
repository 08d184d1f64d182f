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
		limit, err := c.integer("limit")
		if err != nil {
			return err
		}
		p, err := a.Schedules(cmd.Context(), c.str("after"), limit)
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
	ls.Flags().Int("limit", 100, "schedules to show")
	ls.Flags().String("after", "", "continue a listing (the id it printed)")
	show := adminCmd("show ID", "Show one schedule", cobra.ExactArgs(1), func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
		withPayload := c.v.GetBool("payload")
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
	show.Flags().Bool("payload", false, "include the whole payload")
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
			sp := admin.ScheduleSpec{Queue: c.str("queue"), Cron: c.str("cron"), PayloadBase64: base64.StdEncoding.EncodeToString(payload)}
			if every, err := c.duration("every"); err != nil {
				return err
			} else if every != 0 {
				sp.Every = every.String()
			}
			if sp.Headers, err = scheduleFlags(cmd, c); err != nil {
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
	f := cmd.Flags()
	f.String("queue", "", "queue of the jobs")
	f.Duration("every", 0, "interval between jobs (whole seconds)")
	f.String("cron", "", "cron expression of the jobs' times")
	f.String("tz", "", "time zone of --cron (Area/City; header tz)")
	f.String("id", "", "the schedule's name (header schedule-id)")
	f.Bool("nohaste", false, "no job at once: the first at the first due time (header nohaste)")
	f.Int("run-count", 0, "end after N jobs (header run_count; 0 = no end)")
	f.Bool("misfire-skip", false, "no catch-up job for due times missed while no broker ran (header misfire:skip)")
	f.StringArray("header", nil, "header item name=value, or a flag name (repeatable)")
	return cmd
}

// scheduleFlags gathers add's header flags into a headers string.
func scheduleFlags(cmd *cobra.Command, c *config) (string, error) {
	var items []string
	headers, _ := cmd.Flags().GetStringArray("header")
	for _, h := range headers {
		name, value, ok := strings.Cut(h, "=")
		if ok {
			name += ":" + value
		}
		items = append(items, name)
	}
	for _, f := range [][2]string{{"id", emqp.HeaderScheduleID}, {"tz", emqp.HeaderTZ}} { // in one order: the same flags, the same schedule
		if v := c.str(f[0]); v != "" {
			items = append(items, f[1]+":"+v)
		}
	}
	if c.v.GetBool("nohaste") {
		items = append(items, emqp.HeaderNoHaste)
	}
	if c.v.GetBool("misfire-skip") {
		items = append(items, emqp.HeaderMisfire+":skip")
	}
	n, err := c.integer("run-count")
	if err != nil {
		return "", err
	}
	if n < 0 {
		return "", errors.New("run-count: want 0 (no end) or a number of jobs")
	}
	if n > 0 {
		items = append(items, emqp.HeaderRunCount+":"+strconv.Itoa(n))
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
