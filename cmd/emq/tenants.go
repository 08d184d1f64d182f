package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

func newTenantsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tenants", Short: "A queue's tenants (header tenant:): their backlog, and their own limits and weight",
		Long: "A queue's jobs are dispatched by priority, then its tenants in weighted turn. Each tenant has the\n" +
			"queue's tenant limits (emq queues set --tenant-*) unless it has its own. The jobs without a\n" +
			"tenant header are the tenant with the empty name: write it '' or use --no-tenant."}
	adminFlags(cmd)
	cmd.AddCommand(lsTenantsCmd(), setTenantCmd())
	return cmd
}

func lsTenantsCmd() *cobra.Command {
	cmd := adminCmd("ls QUEUE [--offset N] [--limit N]",
		"List a queue's tenants, the largest backlog first (with the broker stopped: those with settings of their own)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var offset, limit int
			b := reader()
			tenantsPageFlags(b, &offset, &limit)
			if err := b.apply(c); err != nil {
				return err
			}
			if offset < 0 || limit < 1 {
				return errors.New("offset: 0 or more; limit: 1 or more")
			}
			p, err := a.Tenants(cmd.Context(), args[0], offset, limit)
			if err != nil {
				return err
			}
			return output(cmd, c, p, func(w io.Writer) {
				fmt.Fprintln(w, "TENANT\tPENDING\tIN FLIGHT\tCONCURRENCY\tRATE\tBURST\tWEIGHT\tOWN\tBLOCKED")
				for _, t := range p.Tenants {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", tenantName(t.Name), t.Pending, t.InFlight,
						limitText(float64(t.Concurrency)), limitText(t.Rate), max(1, t.Burst), t.Weight, ownText(t.Own), yes(t.Blocked))
				}
				fmt.Fprintf(w, "%d of %d tenants", len(p.Tenants), p.Total)
				if p.Next > 0 {
					fmt.Fprintf(w, "; the next page: --offset %d", p.Next)
				}
				fmt.Fprintln(w)
			})
		})
	tenantsPageFlags(&binder{f: cmd.Flags()}, new(0), new(100))
	return cmd
}

// tenantsPageFlags declares emq tenants ls's flags.
func tenantsPageFlags(b *binder, offset, limit *int) {
	b.integer(offset, "offset", "skip this many tenants")
	b.integer(limit, "limit", "list at most this many tenants (up to 10000)")
}

func setTenantCmd() *cobra.Command {
	cmd := adminCmd("set QUEUE NAME [--concurrency N] [--rate R] [--burst B] [--weight W] [--default FIELD,...]",
		"Set a tenant's own limits and weight in a queue (NAME '' or --no-tenant: the jobs without a tenant)", cobra.RangeArgs(1, 2),
		func(cmd *cobra.Command, a admin.API, c *config, args []string) error {
			var ch broker.TenantChange
			var noTenant bool
			b := reader()
			tenantChangeFlags(b, &ch, &noTenant)
			if err := b.apply(c); err != nil {
				return err
			}
			switch {
			case noTenant && len(args) != 1:
				return errors.New("with --no-tenant name only the queue")
			case !noTenant && len(args) != 2:
				return errors.New("name the queue and the tenant ('' or --no-tenant for the jobs without one)")
			}
			queue, name := args[0], ""
			if !noTenant {
				name = args[1]
			}
			if ch.Concurrency == nil && ch.Rate == nil && ch.Burst == nil && ch.Weight == nil && len(ch.Default) == 0 {
				return errors.New("say what to set: --concurrency, --rate, --burst, --weight or --default")
			}
			if _, err := ch.Apply(store.TenantSettings{}); err != nil { // before it travels as JSON (NaN cannot)
				return err
			}
			s, err := a.ChangeTenant(cmd.Context(), queue, name, ch)
			if err != nil {
				return err
			}
			return output(cmd, c, s, func(w io.Writer) {
				fmt.Fprintf(w, "%s\t%s\t%s\n", queue, tenantName(name), ownText(s))
			})
		})
	tenantChangeFlags(&binder{f: cmd.Flags()}, new(broker.TenantChange), new(false))
	return cmd
}

// tenantChangeFlags declares emq tenants set's flags: each changes its
// setting only when given.
func tenantChangeFlags(b *binder, ch *broker.TenantChange, noTenant *bool) {
	b.optInt(&ch.Concurrency, "concurrency", "its jobs in flight at most (0 = no limit, whatever the queue's default)")
	b.optNumber(&ch.Rate, "rate", "its dispatches a second at most (0 = no limit)")
	b.optInt(&ch.Burst, "burst", "its dispatches at once above its rate (0 = 1)")
	b.optInt(&ch.Weight, "weight", "its share of dispatch turns against the queue's other tenants (1 to 1000; 0 = 1)")
	b.list(&ch.Default, "default", "give these back to the queue's default: concurrency, rate, burst, weight (comma-separated)")
	b.boolean(noTenant, "no-tenant", "set the jobs without a tenant header (as NAME '')")
}

// tenantName shows the tenant "" as the jobs without one.
func tenantName(name string) string {
	if name == "" {
		return "(no tenant)"
	}
	return name
}

// limitText is a limit, "-" for none.
func limitText(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ownText says what a tenant has of its own ("-": only the queue's defaults).
func ownText(s store.TenantSettings) string {
	var parts []string
	if s.Concurrency != nil {
		parts = append(parts, "concurrency "+strconv.Itoa(*s.Concurrency))
	}
	if s.Rate != nil {
		parts = append(parts, "rate "+strconv.FormatFloat(*s.Rate, 'g', -1, 64))
	}
	if s.Burst != nil {
		parts = append(parts, "burst "+strconv.Itoa(*s.Burst))
	}
	if s.Weight != 0 {
		parts = append(parts, "weight "+strconv.Itoa(s.Weight))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}
