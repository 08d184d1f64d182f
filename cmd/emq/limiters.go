package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/store"
)

func newLimitersCmd() *cobra.Command {
	cmd := adminCmd("limiters", "Named limiters (header limit:NAME): a concurrency and a rate shared by every job naming one, whatever its queue",
		cobra.NoArgs, func(cmd *cobra.Command, a admin.API, c *config, _ []string) error { return listLimiters(cmd, a, c) })
	cmd.Long = "A job naming limiters (limit:NAME[;NAME...]) runs only when each has room. A REQUEST naming\n" +
		"a limiter that is not defined is refused. With shards, each shard has its own limiters."
	adminFlags(cmd)
	ls := adminCmd("ls", "List the named limiters: their limits, jobs naming them in flight and waiting", cobra.NoArgs,
		func(cmd *cobra.Command, a admin.API, c *config, _ []string) error { return listLimiters(cmd, a, c) })
	cmd.AddCommand(ls, setLimiterCmd(), removeLimiterCmd())
	return cmd
}

func listLimiters(cmd *cobra.Command, a admin.API, c *config) error {
	ls, err := a.Limiters(cmd.Context())
	if err != nil {
		return err
	}
	return output(cmd, c, ls, func(w io.Writer) {
		fmt.Fprintln(w, "LIMITER\tCONCURRENCY\tRATE\tBURST\tIN FLIGHT\tWAITING")
		for _, l := range ls {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\n", l.Name, limitText(float64(l.Concurrency)), limitText(l.Rate),
				max(1, l.Burst), l.InFlight, l.Waiting)
		}
	})
}

func setLimiterCmd() *cobra.Command {
	cmd := adminCmd("set NAME [--concurrency N] [--rate R] [--burst B]",
		"Make or replace a named limiter (it must limit something: a concurrency or a rate)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var s store.LimiterSettings
			b := reader()
			limiterFlags(b, &s)
			if err := b.apply(c); err != nil {
				return err
			}
			if err := s.Validate(); err != nil { // before it travels as JSON (NaN cannot)
				return err
			}
			if err := a.SetLimiter(cmd.Context(), args[0], s); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "limiter %s: concurrency %s, rate %s, burst %d\n", args[0],
				limitText(float64(s.Concurrency)), limitText(s.Rate), max(1, s.Burst))
			return nil
		})
	limiterFlags(&binder{f: cmd.Flags()}, new(store.LimiterSettings))
	return cmd
}

// limiterFlags declares emq limiters set's flags.
func limiterFlags(b *binder, s *store.LimiterSettings) {
	b.integer(&s.Concurrency, "concurrency", "jobs naming it in flight at most, whatever their queue (0 = no limit)")
	b.givenNumber(&s.Rate, "rate", "dispatches of jobs naming it a second at most (0 = no limit)")
	b.integer(&s.Burst, "burst", "dispatches at once above the rate (0 = 1)")
}

func removeLimiterCmd() *cobra.Command {
	return adminCmd("rm NAME", "Remove a named limiter: the jobs naming it run without it; new ones naming it are refused", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin.API, _ *config, args []string) error {
			if err := a.RemoveLimiter(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no limiter %q", args[0])
				}
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed limiter", args[0])
			return nil
		})
}
