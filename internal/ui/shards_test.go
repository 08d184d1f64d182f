package ui_test

import (
	"context"
	"testing"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/shards"
)

// TestShardsPage: a broker that is one shard of several says so on the
// overview, shows the Shards page in its menu, and the page lists the
// shards, their leaders and placed queues, and the moves under way (the
// view as package group describes it; cmd/emq's tests check that against
// real groups).
func TestShardsPage(t *testing.T) {
	view := shards.Info{Shard: "a", Version: 7, Moving: map[string]emqp.Move{"reports": {From: "a", To: "b"}},
		Shards: []shards.ShardInfo{
			{Name: "a", Leader: "a-1", Hashed: true, Queues: []string{"emails"}, Frontend: []string{"tcp://a1:47290"}, Backend: []string{"tcp://a1:47291"}, Prefix: "/emq/a/"},
			{Name: "b", Leader: "", Hashed: true, Queues: []string{}, Frontend: []string{"tcp://b1:47290"}, Backend: []string{"tcp://b1:47291"}, Prefix: "/emq/b/"},
		}}
	b := bt.StartAdmin(t, "", func(o *broker.Options) { bt.Fast(o) }, func(o *admin.Options) {
		o.Group = func() admin.GroupInfo {
			return admin.GroupInfo{Info: group.Info{Role: group.RoleLeader, Name: "a-1", Leader: "a-1", Elections: 1}, Shard: "a", Placement: 7}
		}
		o.Shards = func(context.Context) (shards.Info, error) { return view, nil }
	})
	tb := newTab(t, base(b))
	tb.open("")
	tb.until("the shard on the overview", `document.querySelector('[data-stat="Shard"] .v') && !document.querySelector('#nav-shards').hidden`)
	if got := tb.texts(`[data-stat="Shard"] .v`); got[0] != "a" {
		t.Errorf("the overview's shard: %q", got)
	}
	tb.click(`#nav-shards`)
	tb.until("the shards' rows", `document.querySelector('tr[data-shard="b"]') && document.querySelector('#moves')`)
	if got := tb.texts(`tr[data-shard="a"] td`); len(got) < 4 || got[0] != "a (this one)" || got[1] != "a-1" || got[3] != "emails" {
		t.Errorf("shard a's row: %q", got)
	}
	if got := tb.texts(`tr[data-shard="b"] td`); len(got) < 2 || got[1] != "none" {
		t.Errorf("shard b's row (no leader): %q", got)
	}
	if got := tb.texts(`#moves li`); len(got) != 1 || got[0] != "Queue reports moving from a to b (copying)" {
		t.Errorf("the moves: %q", got)
	}
	if got := tb.texts(`#placement-version`); got[0] != "7" {
		t.Errorf("placement version: %q", got)
	}
	tb.shot("shards")
	tb.noErrors()
}
