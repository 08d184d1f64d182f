// Package groupmember wires one member of a replicated group: the group
// (package group), its admin listener (package admin), and, for a shard
// of several, the shards.Member beside it. Neither group nor shards
// imports admin; this is where they meet, for `emq broker
// --etcd-endpoints` and for the tests' harness (internal/grouptest).
package groupmember

import (
	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/shards"
)

// Member is a group's member and its admin listener (Start it before
// the group's Run, Close it after). Shard is nil unless the group is a
// shard of several.
type Member struct {
	*group.Group
	Server *admin.Server
	Shard  *shards.Member
}

// New wires a member: the admin listener answers as a standby, serves
// each leadership's broker and shows the group; with so.Shard set, a
// shards.Member runs beside the group, and moves reach the other
// shards' admin APIs with aopts' token (shards share theirs) unless
// so.Dial says otherwise.
func New(opts broker.Options, aopts admin.Options, g group.Options, so shards.Options) (*Member, error) {
	m := &Member{}
	if so.Shard != "" {
		if so.Dial == nil {
			token := aopts.Token
			so.Dial = func(addr string) (shards.Peer, error) {
				return admin.NewClient(admin.ClientOptions{Addr: addr, Token: token})
			}
		}
		sh, err := shards.New(g, so, opts.Logger)
		if err != nil {
			return nil, err
		}
		m.Shard, g.Beside, aopts.Shards = sh, sh, sh.Shards
	}
	// m.Group is set below, before the listener starts.
	aopts.Group = func() admin.GroupInfo {
		info := admin.GroupInfo{Info: m.Info(), Shard: so.Shard}
		if m.Shard != nil {
			info.Placement = m.Shard.Version()
		}
		return info
	}
	aopts.Ready = func() error { return m.Running() }
	if aopts.Logger == nil {
		aopts.Logger = opts.Logger
	}
	srv, err := admin.New(aopts)
	if err != nil {
		return nil, err
	}
	m.Server = srv
	opts.Observer = srv.Observer()
	g.Serving = srv.Serve
	if m.Group, err = group.New(opts, g); err != nil {
		return nil, err
	}
	if err := srv.Register(m.Collectors()...); err != nil {
		m.Group.Close()
		return nil, err
	}
	return m, nil
}
