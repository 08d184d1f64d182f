package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/shards"
)

// placementFlags declares the flags that find the placement of shards.
func placementFlags(b *binder, so *shards.Options) {
	b.list(&so.Endpoints, "placement-endpoints", "the etcd holding the placement of queues on shards, client URLs (comma-separated; default: --etcd-endpoints)")
	b.str(&so.Prefix, "placement-prefix", "the placement's key prefix in that etcd")
}

// placementClient connects to the etcd holding the placement, with the
// etcd flags' credentials.
func placementClient(c *config) (*clientv3.Client, string, error) {
	g, err := groupOptions(c)
	if err != nil {
		return nil, "", err
	}
	so := shards.DefaultOptions()
	b := reader()
	placementFlags(b, &so)
	if err := b.apply(c); err != nil {
		return nil, "", err
	}
	if len(so.Endpoints) > 0 {
		g.Endpoints = so.Endpoints
	}
	if len(g.Endpoints) == 0 {
		return nil, "", fmt.Errorf("placement-endpoints: give the etcd that holds the placement (or --etcd-endpoints)")
	}
	prefix := so.Prefix
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return nil, "", fmt.Errorf("placement-prefix: must start and end with /, got %q", prefix)
	}
	cli, err := group.NewClient(g)
	return cli, prefix, err
}

// placementCmd makes a command that works on the placement.
func placementCmd(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadConfig(cmd.Flags(), "")
			if err != nil {
				return err
			}
			cli, prefix, err := placementClient(c)
			if err != nil {
				return err
			}
			defer cli.Close()
			return run(cmd, c, cli, prefix, args)
		}}
	return cmd
}

func newShardsCmd() *cobra.Command {
	cmd := placementCmd("shards", "Shards: the groups queues are spread over, their leaders and queues", cobra.NoArgs, shardsLs)
	f := cmd.PersistentFlags()
	placementFlags(&binder{f: f}, new(shards.DefaultOptions()))
	addEtcdFlags(f, "the etcd of the placement, when --placement-endpoints is not given")
	jsonFlag(&binder{f: f}, new(false), "print JSON instead of a table")
	shardAdminFlags(&binder{f: f}, new(admin.ClientOptions))
	add := placementCmd("add NAME", "Add a shard to the placement, or change where its brokers listen", cobra.ExactArgs(1),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			var s shards.Shard
			var hashed bool
			b := reader()
			addShardFlags(b, &s, &hashed)
			if err := b.apply(c); err != nil {
				return err
			}
			if s.Prefix == "" {
				s.Prefix = "/emq/" + args[0] + "/"
			}
			p, err := shards.ChangePlacement(cmd.Context(), cli, prefix, func(p *shards.Placement) error {
				p.Shards[args[0]] = s
				if hashed && !slices.Contains(p.Hashed, args[0]) {
					p.Hashed = append(p.Hashed, args[0])
				}
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shard %s: journal at %s; placement version %d\n", args[0], s.Prefix, p.Version)
			return nil
		})
	addShardFlags(&binder{f: add.Flags()}, new(shards.Shard), new(false))
	rm := placementCmd("rm NAME", "Take a shard out of the placement (no queue may be placed on it)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			p, err := shards.ChangePlacement(cmd.Context(), cli, prefix, func(p *shards.Placement) error {
				if _, ok := p.Shards[args[0]]; !ok {
					return fmt.Errorf("shard %s is not in the placement", args[0])
				}
				if slices.Contains(p.Hashed, args[0]) {
					return fmt.Errorf("shard %s takes hashed queues; take it out of them first (emq shards hashed)", args[0])
				}
				for q, s := range p.Queues {
					if s == args[0] {
						return fmt.Errorf("queue %s is placed on shard %s; place it elsewhere first", q, s)
					}
				}
				delete(p.Shards, args[0])
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shard %s removed; placement version %d\n", args[0], p.Version)
			return nil
		})
	hashed := placementCmd("hashed SHARD[,SHARD...]", "Set the shards that queues not placed explicitly are spread over", cobra.ExactArgs(1),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			list := strings.Split(args[0], ",")
			p, err := shards.ChangePlacement(cmd.Context(), cli, prefix, func(p *shards.Placement) error {
				p.Hashed = list
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "hashed over %s; placement version %d\n", strings.Join(list, ","), p.Version)
			return nil
		})
	cmd.AddCommand(add, rm, hashed, newShardsStatsCmd())
	return cmd
}

// shardAdminFlags declares the flags emq shards stats reaches the
// shards' admin APIs with (their addresses are the placement's).
func shardAdminFlags(b *binder, o *admin.ClientOptions) {
	b.str(&o.Token, "admin-token", "the shards' admin token, or read-only token, for emq shards stats (or EMQ_ADMIN_TOKEN)")
	b.str(&o.CA, "admin-ca", "with https admin addresses: trust this CA certificate (PEM)")
}

// addShardFlags declares emq shards add's flags.
func addShardFlags(b *binder, s *shards.Shard, hashed *bool) {
	b.list(&s.Frontend, "frontend", "its brokers' frontends, where clients connect (comma-separated tcp://host:port)")
	b.list(&s.Backend, "backend", "its brokers' backends, where workers connect (comma-separated tcp://host:port)")
	b.list(&s.Admin, "shard-admin", "its brokers' admin addresses (comma-separated host:port), for the admin tools")
	b.list(&s.Etcd, "shard-etcd", "its journal's etcd, client URLs (comma-separated; default: the placement's etcd)")
	b.str(&s.Prefix, "shard-prefix", "its group's --etcd-prefix (default /emq/NAME/)")
	b.boolean(hashed, "hashed", "also spread queues not placed explicitly over it (changes where some queues go: see emq shards hashed)")
}

func shardsLs(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, _ []string) error {
	p, _, err := shards.LoadPlacement(cmd.Context(), cli, prefix)
	if err != nil {
		return err
	}
	g, err := groupOptions(c)
	if err != nil {
		return err
	}
	v := shards.Describe(cmd.Context(), p, cli, g)
	return output(cmd, c, v, func(w io.Writer) {
		fmt.Fprintf(w, "placement version %d\n", v.Version)
		fmt.Fprintln(w, "SHARD\tLEADER\tHASHED\tQUEUES\tFRONTEND\tBACKEND\tJOURNAL")
		for _, s := range v.Shards {
			queues := strings.Join(s.Queues, ",")
			where := s.Prefix
			if len(s.Etcd) > 0 {
				where = strings.Join(s.Etcd, ",") + " " + s.Prefix
			}
			fmt.Fprintf(w, "%s\t%s\t%v\t%s\t%s\t%s\t%s\n", s.Name, orDash(s.Leader), s.Hashed, orDash(queues),
				strings.Join(s.Frontend, ","), strings.Join(s.Backend, ","), where)
		}
		for q, m := range v.Moving {
			fmt.Fprintf(w, "queue %s: moving from %s to %s (copied: %v)\n", q, m.From, m.To, m.Copied)
		}
	})
}

// placeQueueCmd is emq queues place: a change of the placement, or,
// when the queue changes shards, a move (emqp.Move) that the source
// shard's leader carries out (group/move.go); the command waits for it.
func placeQueueCmd() *cobra.Command {
	cmd := placementCmd("place QUEUE SHARD", "Place a queue on a shard (\"-\" as SHARD: back to the hash rule), moving its stored jobs, dead letters, schedules and controls there", cobra.ExactArgs(2),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			wait := true
			b := reader()
			placeFlags(b, &wait)
			if err := b.apply(c); err != nil {
				return err
			}
			queue, shard := args[0], args[1]
			ctx := cmd.Context()
			var from, to string
			p, err := shards.ChangePlacement(ctx, cli, prefix, func(p *shards.Placement) error {
				if m, ok := p.Moving[queue]; ok {
					return fmt.Errorf("queue %s is being moved from %s to %s; wait for the move to end", queue, m.From, m.To)
				}
				if _, ok := p.Shards[shard]; !ok && shard != "-" {
					return fmt.Errorf("shard %s is not in the placement (emq shards add)", shard)
				}
				from = p.Table().Owner(queue)
				save := p.Queues
				p.Queues = maps.Clone(save)
				shards.PlaceQueue(p, queue, shard)
				to = p.Table().Owner(queue)
				if from == "" || from == to || to == "" {
					return nil // nobody held it, or it stays: nothing to move
				}
				p.Queues = save
				if p.Moving == nil {
					p.Moving = map[string]emqp.Move{}
				}
				p.Moving[queue] = emqp.Move{From: from, To: to}
				return nil
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if _, moving := p.Moving[queue]; !moving {
				fmt.Fprintf(out, "queue %s: on shard %s (was %s); placement version %d\n", queue, orDash(to), orDash(from), p.Version)
				return nil
			}
			fmt.Fprintf(out, "queue %s: moving from shard %s to shard %s (placement version %d); its new jobs wait meanwhile\n", queue, from, to, p.Version)
			if !wait {
				return nil
			}
			start := time.Now()
			for {
				p, _, err := shards.LoadPlacement(ctx, cli, prefix)
				if err != nil {
					return err
				}
				if _, moving := p.Moving[queue]; !moving {
					fmt.Fprintf(out, "queue %s: on shard %s, moved in %v; placement version %d\n", queue, p.Table().Owner(queue), time.Since(start).Round(time.Millisecond), p.Version)
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("queue %s: still moving (the shards' leaders carry it on): %w", queue, ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	b := &binder{f: cmd.Flags()}
	placementFlags(b, new(shards.DefaultOptions()))
	placeFlags(b, new(true))
	return cmd
}

// placeFlags declares emq queues place's own flag.
func placeFlags(b *binder, wait *bool) {
	b.boolean(wait, "wait", "wait until the move has ended")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ShardStats is one shard's part of emq shards stats.
type ShardStats struct {
	Shard    string             `json:"shard"`
	Admin    string             `json:"admin,omitempty"` // the leader's admin address asked
	Error    string             `json:"error,omitempty"`
	Counters []admin.NamedCount `json:"counters,omitempty"`
	Queues   []broker.QueueInfo `json:"queues,omitempty"`
}

// newShardsStatsCmd is emq shards stats: every shard's leader asked for
// its counters and queues, summed.
func newShardsStatsCmd() *cobra.Command {
	return placementCmd("stats", "Counters and queues of every shard's leader, and their sums (asks each at its --shard-admin address)", cobra.NoArgs,
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, _ []string) error {
			var ao admin.ClientOptions
			b := reader()
			shardAdminFlags(b, &ao)
			if err := b.apply(c); err != nil {
				return err
			}
			ctx := cmd.Context()
			p, _, err := shards.LoadPlacement(ctx, cli, prefix)
			if err != nil {
				return err
			}
			var all []ShardStats
			total := map[string]int64{}
			var order []string
			for _, name := range slices.Sorted(maps.Keys(p.Shards)) {
				st := ShardStats{Shard: name}
				a, addr, err := shardAdmin(ctx, ao, p.Shards[name])
				if err == nil {
					st.Admin = addr
					var s admin.StatsInfo
					if s, err = a.Stats(ctx); err == nil {
						st.Counters = s.Counters
						st.Queues, err = a.Queues(ctx)
					}
				}
				if err != nil {
					st.Error = err.Error()
				}
				for _, n := range st.Counters {
					if _, ok := total[n.Name]; !ok {
						order = append(order, n.Name)
					}
					total[n.Name] += n.Value
				}
				all = append(all, st)
			}
			sum := ShardStats{Shard: "total"}
			for _, name := range order {
				sum.Counters = append(sum.Counters, admin.NamedCount{Name: name, Value: total[name]})
			}
			return output(cmd, c, map[string]any{"shards": all, "total": sum}, func(w io.Writer) {
				fmt.Fprint(w, "COUNTER")
				for _, s := range all {
					fmt.Fprintf(w, "\t%s", s.Shard)
				}
				fmt.Fprintln(w, "\tTOTAL")
				for _, name := range order {
					fmt.Fprint(w, name)
					for _, s := range all {
						v := "-"
						for _, n := range s.Counters {
							if n.Name == name {
								v = strconv.FormatInt(n.Value, 10)
							}
						}
						fmt.Fprintf(w, "\t%s", v)
					}
					fmt.Fprintf(w, "\t%d\n", total[name])
				}
				fmt.Fprintln(w, "\nQUEUE\tSHARD\tPENDING\tDELAYED\tIN FLIGHT\tDEAD\tWORKERS")
				for _, s := range all {
					for _, q := range s.Queues {
						fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", q.Name, s.Shard, q.Pending, q.Delayed, q.InFlight, q.Dead, q.Workers)
					}
				}
				for _, s := range all {
					if s.Error != "" {
						fmt.Fprintf(w, "shard %s: %s\n", s.Shard, s.Error)
					}
				}
			})
		})
}
