package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/store"
)

// offlineRekeyRate is the pace of a rekey no broker serves beside: a
// pause of a quarter of a millisecond a step, none worth the name.
const offlineRekeyRate = 1_000_000

// rekeyOptions are emq journal rekey's own flags.
type rekeyOptions struct {
	rate int
	wait bool
}

// rekeyFlags are read from the command line alone: an EMQ_WAIT or
// EMQ_RATE meant for another command (emq send --wait) is not this one's.
func rekeyFlags(b *binder, o *rekeyOptions) {
	if b.f != nil {
		b.f.Int("rate", o.rate, fmt.Sprintf("values a second to seal again at most (0: the rate of the rekey under way, else %d from a running broker, as fast as it goes offline); given to a rekey under way, it changes its rate", store.DefaultRekeyRate))
		b.f.Bool("wait", o.wait, "print its progress every second until it ends (always offline: it runs while the command does)")
	}
	b.given("rate", func(c *config) (err error) { o.rate, err = c.integer("rate"); return err })
	b.given("wait", func(c *config) (err error) { o.wait, err = c.boolean("wait"); return err })
}

func newJournalRekeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rekey [--wait] [--rate N]",
		Short: "Seal again under the first key of --journal-keys what the journal holds under older keys, so that they may go",
		Long: `Seal again, under the journal's first key, every job, result and
schedule stored under an older key (or in clear), so that the older keys
may go from the key file (docs/security.md, Rotating keys).

Online (--admin: a running broker's admin address, with its full admin
token): the broker seals in the background, in turn with its own writes, at most --rate
values a second; its progress is in the journal, so a restart or a
group's next leader goes on from where it was. emq stats and the
dashboard show it. Without --wait this command starts it (or changes the
rate of the one under way) and prints where it is; with --wait it prints
its progress every second until it ends.

Offline (--data-dir DIR --journal-keys FILE, the broker stopped; or a
group's journal in etcd with --etcd-endpoints, no broker of the group
running): it opens the journal with the keys, seals as fast as it goes,
printing its progress, and closes it. Stopped half way (SIGINT), it
goes on where it was at the journal's next open for writing.

At the end it names the keys the journal no longer needs: remove their
lines from the key file and send the broker SIGHUP. A backup taken
before still needs them.`,
		Args: cobra.NoArgs,
	}
	adminFlags(cmd)
	rekeyFlags(&binder{f: cmd.Flags()}, new(rekeyOptions))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		a, c, err := openAdmin(cmd)
		if err != nil {
			return err
		}
		defer a.Close()
		var o rekeyOptions
		b := reader()
		rekeyFlags(b, &o)
		if err := b.apply(c); err != nil {
			return err
		}
		if o.rate < 0 {
			return fmt.Errorf("rate: %d; want values a second, 0 for the default", o.rate)
		}
		_, offline := a.(*admin.Offline)
		if offline {
			o.wait = true // the rekey stops when the journal closes
			if o.rate == 0 {
				o.rate = offlineRekeyRate
			}
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		st, err := a.Rekey(ctx, o.rate)
		if err != nil {
			return err
		}
		var asJSON bool
		jb := reader()
		jsonFlag(jb, &asJSON, "")
		if err := jb.apply(c); err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if !asJSON {
			fmt.Fprintln(out, st)
		}
		if o.wait {
			progress := out
			if asJSON {
				progress = io.Discard
			}
			if st, err = followRekey(ctx, a, st, progress, time.Second); err != nil {
				if offline && ctx.Err() != nil {
					return fmt.Errorf("%w: stopped at %s (it goes on where it was at the journal's next open for writing)", ctx.Err(), st)
				}
				return err
			}
		}
		if asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		switch {
		case !o.wait && st.Running:
			fmt.Fprintln(out, "it goes on in the broker: emq journal rekey --wait, emq stats or the dashboard show it")
		case !st.Finished.IsZero() && len(st.Dropped) > 0:
			fmt.Fprintf(out, "key %s may go: remove its line from the key file and send the broker SIGHUP (a backup taken before still needs it)\n",
				strings.Join(st.Dropped, ", "))
		}
		return nil
	}
	return cmd
}

// followRekey prints the rekey's progress every interval while it
// changes, until it ends, and returns how it ended.
func followRekey(ctx context.Context, a admin.API, st store.RekeyStatus, w io.Writer, interval time.Duration) (store.RekeyStatus, error) {
	last, stopped := st.String(), 0
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if !st.Running && !st.Finished.IsZero() {
			return st, nil
		}
		if !st.Running {
			// Not running and not finished: stopped (the broker stops), or
			// caught between the two.
			if stopped++; stopped > 2 {
				return st, fmt.Errorf("the rekey stopped: %s", st)
			}
		} else {
			stopped = 0
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-t.C:
		}
		next, err := a.RekeyStatus(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return st, err
			}
			return st, fmt.Errorf("following the rekey: %w", err)
		}
		st = next
		if line := st.String(); line != last {
			fmt.Fprintln(w, line)
			last = line
		}
	}
}
