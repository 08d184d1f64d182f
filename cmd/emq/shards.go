package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
)

// placementFlags adds the flags that find the placement of shards.
func placementFlags(f *pflag.FlagSet) {
	f.String("placement-endpoints", "", "the etcd holding the placement of queues on shards, client URLs (comma-separated; default: --etcd-endpoints)")
	f.String("placement-prefix", group.DefaultPlacementPrefix, "the placement's key prefix in that etcd")
}

// placementClient connects to the etcd holding the placement, with the
// etcd flags' credentials.
func placementClient(c *config) (*clientv3.Client, string, error) {
	g, err := groupOptions(c)
	if err != nil {
		return nil, "", err
	}
	if eps := c.list("placement-endpoints"); len(eps) > 0 {
		g.Endpoints = eps
	}
	if len(g.Endpoints) == 0 {
		return nil, "", fmt.Errorf("placement-endpoints: give the etcd that holds the placement (or --etcd-endpoints)")
	}
	prefix := c.str("placement-prefix")
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
	placementFlags(f)
	addEtcdFlags(f, "the etcd of the placement, when --placement-endpoints is not given")
	f.Bool("json", false, "print JSON instead of a table")
	add := placementCmd("add NAME", "Add a shard to the placement, or change where its brokers listen", cobra.ExactArgs(1),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			s := group.Shard{ShardRoute: emqp.ShardRoute{Frontend: c.list("frontend"), Backend: c.list("backend"), Admin: c.list("shard-admin")},
				Etcd: c.list("shard-etcd"), Prefix: c.str("shard-prefix")}
			if s.Prefix == "" {
				s.Prefix = "/emq/" + args[0] + "/"
			}
			hashed := c.v.GetBool("hashed")
			p, err := group.ChangePlacement(cmd.Context(), cli, prefix, func(p *group.Placement) error {
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
	af := add.Flags()
	af.String("frontend", "", "its brokers' frontends, where clients connect (comma-separated tcp://host:port)")
	af.String("backend", "", "its brokers' backends, where workers connect (comma-separated tcp://host:port)")
	af.String("shard-admin", "", "its brokers' admin addresses (comma-separated host:port), for the admin tools")
	af.String("shard-etcd", "", "its journal's etcd, client URLs (comma-separated; default: the placement's etcd)")
	af.String("shard-prefix", "", "its group's --etcd-prefix (default /emq/NAME/)")
	af.Bool("hashed", false, "also spread queues not placed explicitly over it (changes where some queues go: see emq shards hashed)")
	rm := placementCmd("rm NAME", "Take a shard out of the placement (no queue may be placed on it)", cobra.ExactArgs(1),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			p, err := group.ChangePlacement(cmd.Context(), cli, prefix, func(p *group.Placement) error {
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
			p, err := group.ChangePlacement(cmd.Context(), cli, prefix, func(p *group.Placement) error {
				p.Hashed = list
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "hashed over %s; placement version %d\n", strings.Join(list, ","), p.Version)
			return nil
		})
	cmd.AddCommand(add, rm, hashed)
	return cmd
}

// ShardView is one shard as emq shards shows it.
type ShardView struct {
	Name   string   `json:"name"`
	Leader string   `json:"leader"` // "" = none now
	Hashed bool     `json:"hashed"`
	Queues []string `json:"queues"` // placed on it explicitly
	group.Shard
}

// PlacementView is what emq shards shows.
type PlacementView struct {
	Version int64                `json:"version"`
	Shards  []ShardView          `json:"shards"`
	Moving  map[string]emqp.Move `json:"moving,omitempty"`
}

func shardsLs(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, _ []string) error {
	p, _, err := group.LoadPlacement(cmd.Context(), cli, prefix)
	if err != nil {
		return err
	}
	v := PlacementView{Version: p.Version, Moving: p.Moving}
	names := make([]string, 0, len(p.Shards))
	for name := range p.Shards {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := p.Shards[name]
		sv := ShardView{Name: name, Shard: s, Hashed: slices.Contains(p.Hashed, name), Queues: []string{}}
		for q, on := range p.Queues {
			if on == name {
				sv.Queues = append(sv.Queues, q)
			}
		}
		sort.Strings(sv.Queues)
		sv.Leader, err = shardLeader(cmd.Context(), c, cli, s)
		if err != nil {
			sv.Leader = "? (" + err.Error() + ")"
		}
		v.Shards = append(v.Shards, sv)
	}
	return output(cmd, c, v, func(w io.Writer) {
		fmt.Fprintf(w, "placement version %d\n", v.Version)
		fmt.Fprintln(w, "SHARD\tLEADER\tHASHED\tQUEUES\tFRONTEND\tBACKEND\tJOURNAL")
		for _, s := range v.Shards {
			leader := s.Leader
			if leader == "" {
				leader = "-"
			}
			queues := strings.Join(s.Queues, ",")
			if queues == "" {
				queues = "-"
			}
			where := s.Prefix
			if len(s.Etcd) > 0 {
				where = strings.Join(s.Etcd, ",") + " " + s.Prefix
			}
			fmt.Fprintf(w, "%s\t%s\t%v\t%s\t%s\t%s\t%s\n", s.Name, leader, s.Hashed, queues,
				strings.Join(s.Frontend, ","), strings.Join(s.Backend, ","), where)
		}
		for q, m := range v.Moving {
			fmt.Fprintf(w, "queue %s: moving from %s to %s (copied: %v)\n", q, m.From, m.To, m.Copied)
		}
	})
}

// shardLeader asks the shard's etcd who leads its group.
func shardLeader(ctx context.Context, c *config, cli *clientv3.Client, s group.Shard) (string, error) {
	if len(s.Etcd) > 0 {
		g, err := groupOptions(c)
		if err != nil {
			return "", err
		}
		g.Endpoints = s.Etcd
		if cli, err = group.NewClient(g); err != nil {
			return "", err
		}
		defer cli.Close()
	}
	return group.Leader(ctx, cli, s.Prefix)
}

// placeQueueCmd is emq queues place: a change of the placement, or,
// when the queue changes shards, a move (emqp.Move) that the source
// shard's leader carries out (group/move.go); the command waits for it.
func placeQueueCmd() *cobra.Command {
	cmd := placementCmd("place QUEUE SHARD", "Place a queue on a shard (\"-\" as SHARD: back to the hash rule), moving its stored jobs, dead letters, schedules and controls there", cobra.ExactArgs(2),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			queue, shard := args[0], args[1]
			ctx := cmd.Context()
			var from, to string
			p, err := group.ChangePlacement(ctx, cli, prefix, func(p *group.Placement) error {
				if m, ok := p.Moving[queue]; ok {
					return fmt.Errorf("queue %s is being moved from %s to %s; wait for the move to end", queue, m.From, m.To)
				}
				if _, ok := p.Shards[shard]; !ok && shard != "-" {
					return fmt.Errorf("shard %s is not in the placement (emq shards add)", shard)
				}
				from = p.Table().Owner(queue)
				save := p.Queues
				p.Queues = maps.Clone(save)
				group.PlaceQueue(p, queue, shard)
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
			if !c.v.GetBool("wait") {
				return nil
			}
			start := time.Now()
			for {
				p, _, err := group.LoadPlacement(ctx, cli, prefix)
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
	placementFlags(cmd.Flags())
	cmd.Flags().Bool("wait", true, "wait until the move has ended")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
