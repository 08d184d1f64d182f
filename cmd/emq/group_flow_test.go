package main

import (
	"encoding/json"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
)

// A group's new leader has the flow settings the old one stored in etcd
// (a queue's tenant defaults, a tenant's own settings and weight, a named
// limiter) and dispatches by them: a job naming an undefined limiter is
// refused, and a tenant's concurrency holds.
func TestGroupFailoverKeepsFlowSettings(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leader := leaderOf(t, a, b)
	standby := a
	if leader == a {
		standby = b
	}
	on := func(g *groupBroker) []string { return []string{"--admin", g.admin} }
	mustEmq(t, append([]string{"queues", "set", "q", "--tenant-concurrency", "1"}, on(leader)...)...)
	mustEmq(t, append([]string{"tenants", "set", "q", "acme", "--concurrency", "2", "--weight", "3"}, on(leader)...)...)
	mustEmq(t, append([]string{"limiters", "set", "api", "--concurrency", "5", "--rate", "10"}, on(leader)...)...)

	leader.kill()
	leaderOf(t, standby)
	var page broker.TenantPage
	if err := json.Unmarshal([]byte(mustEmq(t, append([]string{"tenants", "ls", "q", "--json"}, on(standby)...)...)), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Tenants) != 1 || page.Tenants[0].Name != "acme" || page.Tenants[0].Concurrency != 2 || page.Tenants[0].Weight != 3 {
		t.Fatalf("the new leader's tenants of q: %+v", page.Tenants)
	}
	var limiters []broker.LimiterInfo
	if err := json.Unmarshal([]byte(mustEmq(t, append([]string{"limiters", "ls", "--json"}, on(standby)...)...)), &limiters); err != nil {
		t.Fatal(err)
	}
	if len(limiters) != 1 || limiters[0].Name != "api" || limiters[0].Concurrency != 5 || limiters[0].Rate != 10 {
		t.Fatalf("the new leader's limiters: %+v", limiters)
	}

	// The queue's default for tenants holds on the new leader: one job of
	// tenant beta at a time, whatever the worker offers.
	c := bt.Dial(t, standby.frontend, "c")
	first := c.Request("q", "tenant:beta,limit:api", nil)
	c.Request("q", "tenant:beta", nil)
	w := bt.Worker(t, standby.backend, "w", "q")
	w.Ready(5)
	if j := bt.Expect[*emqp.Request](w); j.MsgID != first {
		t.Fatalf("first job %s, want %s", j.MsgID, first)
	}
	marker := c.Request("q", "tenant:other", nil)
	if j := bt.Expect[*emqp.Request](w); j.MsgID != marker {
		t.Fatalf("got %s before the other tenant's job: beta's concurrency of 1 did not hold", j.MsgID)
	}
}
