package main

import (
	"context"
	"errors"
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

	"github.com/eventmq/emq/admin"
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
	Version int64             `json:"version"`
	Shards  []ShardView       `json:"shards"`
	Moving  map[string]string `json:"moving,omitempty"`
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
		for q, to := range v.Moving {
			fmt.Fprintf(w, "queue %s: moving to %s\n", q, to)
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

// placeQueueCmd is emq queues place.
//
// A queue changes shards in three steps, so that no job is left where
// nobody serves it: the placement marks it moving (both shards refuse
// its new jobs with ERROR unavailable, which clients retry), the old
// owner's leader is asked, once it serves by that placement, whether it
// holds jobs or schedules of the queue, and then either the placement
// puts it on the new shard or, when the old one holds something, the
// mark is taken back and the command refuses.
func placeQueueCmd() *cobra.Command {
	cmd := placementCmd("place QUEUE SHARD", "Place a queue on a shard: new jobs for it go there (\"-\" as SHARD: back to the hash rule); refused while the old shard holds jobs of it", cobra.ExactArgs(2),
		func(cmd *cobra.Command, c *config, cli *clientv3.Client, prefix string, args []string) error {
			queue, shard := args[0], args[1]
			ctx := cmd.Context()
			place := func(p *group.Placement) {
				delete(p.Moving, queue)
				if shard == "-" {
					delete(p.Queues, queue)
					return
				}
				if p.Queues == nil {
					p.Queues = map[string]string{}
				}
				p.Queues[queue] = shard
			}
			var from, to string
			var src group.Shard
			p, err := group.ChangePlacement(ctx, cli, prefix, func(p *group.Placement) error {
				if _, ok := p.Moving[queue]; ok {
					return fmt.Errorf("queue %s is being moved; wait for the move to end", queue)
				}
				if _, ok := p.Shards[shard]; !ok && shard != "-" {
					return fmt.Errorf("shard %s is not in the placement (emq shards add)", shard)
				}
				from = p.Table().Owner(queue)
				save := p.Queues
				p.Queues = maps.Clone(save)
				place(p) // on a copy, to see where it goes
				to = p.Table().Owner(queue)
				p.Queues = save
				if from == "" || from == to {
					place(p) // nobody serves it, or the same shard: nothing to check
					return nil
				}
				src = p.Shards[from]
				if p.Moving == nil {
					p.Moving = map[string]string{}
				}
				p.Moving[queue] = orDash(to)
				return nil
			})
			if err != nil {
				return err
			}
			if from != "" && from != to {
				holds, err := shardHolds(ctx, c, src, queue, p.Version)
				if err == nil && holds != "" {
					err = fmt.Errorf("shard %s holds %s of queue %s, which would stay there unserved; moving stored jobs is not built yet", from, holds, queue)
				}
				if err != nil {
					_, berr := group.ChangePlacement(ctx, cli, prefix, func(p *group.Placement) error {
						delete(p.Moving, queue)
						return nil
					})
					return errors.Join(fmt.Errorf("queue %s stays on shard %s: %w", queue, from, err), berr)
				}
				if p, err = group.ChangePlacement(ctx, cli, prefix, func(p *group.Placement) error {
					place(p)
					return nil
				}); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s: on shard %s (was %s); placement version %d\n", queue, orDash(to), orDash(from), p.Version)
			return nil
		})
	placementFlags(cmd.Flags())
	return cmd
}

// shardHolds asks the leader of shard s, once it serves by placement
// version or a later one, what it holds of queue: "" for nothing, else
// the counts in words.
func shardHolds(ctx context.Context, c *config, s group.Shard, queue string, version int64) (string, error) {
	if len(s.Admin) == 0 {
		return "", errors.New("its shard lists no admin address to ask whether it holds jobs of the queue (emq shards add --shard-admin)")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		for _, addr := range s.Admin {
			a, err := admin.NewClient(admin.ClientOptions{Addr: addr, Token: c.str("admin-token"), CA: c.str("admin-ca")})
			if err != nil {
				return "", err
			}
			st, err := a.Stats(ctx)
			switch {
			case err != nil:
				last = fmt.Errorf("admin %s: %w", addr, err)
				continue
			case st.Group == nil || st.Group.State != "leader":
				continue
			case st.Group.Placement < version:
				last = fmt.Errorf("its leader has not seen placement version %d yet", version)
				continue
			}
			qs, err := a.Queues(ctx)
			if err != nil {
				return "", fmt.Errorf("admin %s: %w", addr, err)
			}
			for _, q := range qs {
				if q.Name == queue && q.Pending+q.Delayed+q.InFlight+q.Dead > 0 {
					return fmt.Sprintf("%d pending, %d delayed, %d in flight and %d dead jobs", q.Pending, q.Delayed, q.InFlight, q.Dead), nil
				}
			}
			for after := ""; ; {
				page, err := a.Schedules(ctx, after, 1000)
				if err != nil {
					return "", fmt.Errorf("admin %s: %w", addr, err)
				}
				for _, sc := range page.Schedules {
					if sc.Queue == queue {
						return "schedule " + sc.ID, nil
					}
				}
				if after = page.Next; after == "" {
					return "", nil
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if last == nil {
		last = errors.New("no leader answered")
	}
	return "", fmt.Errorf("cannot ask its leader: %w", last)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
