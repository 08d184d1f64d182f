package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
			o, ok := a.(*online)
			if !ok {
				return errNeedsBroker
			}
			count, err := c.integer("count")
			if err != nil {
				return err
			}
			q := url.Values{}
			for _, k := range []string{"queue", "msgid"} {
				if v := c.str(k); v != "" {
					q.Set(k, v)
				}
			}
			req, err := http.NewRequestWithContext(cmd.Context(), "GET", o.base+"/api/v1/events?"+q.Encode(), nil)
			if err != nil {
				return err
			}
			resp, err := o.do(&http.Client{Transport: o.http.Transport}, req) // no timeout: it follows
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return printEvents(cmd.OutOrStdout(), resp.Body, c.v.GetBool("json"), count)
		},
	}
	adminFlags(cmd)
	cmd.Flags().String("queue", "", "only the events of this queue")
	cmd.Flags().String("msgid", "", "only the events of this job")
	cmd.Flags().Int("count", 0, "stop after this many events (0 = follow until stopped)")
	return cmd
}

// printEvents prints the events of an SSE stream, a line each, until it
// ends, or after count (if not 0). A stream that ends with "dropped" is
// an error.
func printEvents(w io.Writer, stream io.Reader, asJSON bool, count int) error {
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	kind := ""
	for n := 0; sc.Scan(); {
		line := sc.Text()
		if k, ok := strings.CutPrefix(line, "event: "); ok {
			kind = k
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if kind == "dropped" {
			var d struct{ Reason string }
			if json.Unmarshal([]byte(data), &d) != nil || d.Reason == "" {
				d.Reason = data
			}
			return fmt.Errorf("the event stream ended: %s", d.Reason)
		}
		if asJSON {
			fmt.Fprintln(w, data)
		} else {
			var e broker.Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				return fmt.Errorf("event %q: %w", data, err)
			}
			fmt.Fprintln(w, eventLine(e))
		}
		if n++; count > 0 && n >= count {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the event stream ended")
}

// eventLine is an event in one line: time, kind, then what it has.
func eventLine(e broker.Event) string {
	parts := []string{e.Time.Format(time.RFC3339Nano), e.Kind}
	for _, kv := range [][2]string{{"queue", e.Queue}, {"msgid", e.MsgID}, {"worker", e.Worker}, {"reason", e.Reason}} {
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
