package main

import (
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/internal/sdnotify"
)

// groupPoll is how often a group's role is looked at: the group has no
// channel that says when it changes.
const groupPoll = 100 * time.Millisecond

// whenReady tells n that b is ready once it serves, unless done closes
// first. A broker serves once its journal is replayed and its endpoints
// are bound. A group's broker is ready once it has joined the group, as
// standby or leader: a standby is started (its admin API answers, it
// campaigns and takes over when elected) and an election may be far
// off; the status says which it is and follows its changes. One that
// cannot reach etcd is not ready: systemd's start timeout fails it and
// Restart= tries again.
func whenReady(n *sdnotify.Notifier, b runner, done <-chan struct{}) {
	switch b := b.(type) {
	case *broker.Broker:
		select {
		case <-b.Ready():
			n.Ready("serving: clients on " + b.Frontend() + ", workers on " + b.Backend())
		case <-done:
		}
	case *group.Group:
		t := time.NewTicker(groupPoll)
		defer t.Stop()
		said := ""
		for {
			if status := groupStatus(b); status != said {
				if said = status; status != "" {
					n.Ready(status)
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}
}

// groupStatus is the status of g's role, "" while it has not joined its
// group.
func groupStatus(g *group.Group) string {
	info := g.Info()
	switch {
	case info.Role == group.RoleLeader:
		return "leader of the group, as " + info.Name
	case info.Role != group.RoleStandby:
		return ""
	case info.Leader == "":
		return "standby in the group, as " + info.Name + "; no leader yet"
	}
	return "standby in the group, as " + info.Name + "; the leader is " + info.Leader
}
