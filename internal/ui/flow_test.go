package ui_test

import (
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// Flow control in a real browser: the queue page shows the tenants'
// defaults and its tenants, the largest backlog first, with their limits,
// weight and whether they are at their limit; the job page says why the
// job waits.
func TestFlowPages(t *testing.T) {
	b := bt.StartAdmin(t, "", bt.Fast, nil)
	ctx := t.Context()
	one, three := 1, 3
	if _, err := b.ChangeQueue(ctx, "mail", broker.QueueChange{TenantConcurrency: &one}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ChangeTenant(ctx, "mail", "beta", broker.TenantChange{Weight: &three}); err != nil {
		t.Fatal(err)
	}
	c := bt.Dial(t, b.Frontend(), "c")
	held := c.Request("mail", "tenant:acme", nil)
	waiting := c.Request("mail", "tenant:acme", nil)
	c.Request("mail", "tenant:acme", nil)
	c.Request("mail", "tenant:beta", nil)
	w := bt.Worker(t, b.Backend(), "w", "mail")
	w.Ready(3) // acme's first, then beta's: acme is at its limit
	if r := bt.Expect[*emqp.Request](w); r.MsgID != held {
		t.Fatalf("ran %s first; want acme's first", r.MsgID)
	}
	bt.Expect[*emqp.Request](w)
	bt.Eventually(t, "acme at its limit", func() bool {
		p, err := b.Tenants(ctx, "mail", 0, 10)
		return err == nil && len(p.Tenants) == 2 && p.Tenants[0].Name == "acme" && p.Tenants[0].InFlight == 1 && p.Tenants[0].Blocked
	})

	tb := newTab(t, base(b))
	tb.open("queue/mail")
	tb.until("the tenants", `document.querySelector('#tenants tr[data-tenant="beta"]')`)
	if got := tb.texts(`#numbers [data-stat="Each tenant"] .v`); len(got) != 1 || got[0] != "≤ 1 in flight" {
		t.Errorf("the tenants' defaults: %q", got)
	}
	rows := tb.texts(`#tenants tbody tr`)
	if len(rows) != 2 {
		t.Fatalf("tenant rows: %q", rows)
	}
	acme, beta := tb.texts(`#tenants tr[data-tenant="acme"] td`), tb.texts(`#tenants tr[data-tenant="beta"] td`)
	if acme[0] != "acme" || acme[1] != "2" || acme[2] != "1" || acme[3] != "≤ 1 in flight" || acme[4] != "1" || acme[5] != "at its limit" {
		t.Errorf("acme's row: %q; want 2 pending, 1 in flight, its limit, weight 1, at its limit", acme)
	}
	if beta[1] != "0" || beta[2] != "1" || beta[4] != "3" || beta[5] != "" {
		t.Errorf("beta's row: %q; want 0 pending, 1 in flight, weight 3, not at its limit", beta)
	}
	if first := tb.texts(`#tenants tbody tr td:first-child`); first[0] != "acme" {
		t.Errorf("tenants in order %q; want the largest backlog first", first)
	}
	tb.shot("tenants")

	tb.open("job/" + waiting)
	tb.until("why it waits", `document.querySelector('#why[data-reason]')`)
	if got := tb.texts(`#why`); got[0] != `Tenant "acme" is at its concurrency: 1 of 1 jobs run (`+held+`).` {
		t.Errorf("why: %q", got)
	}
	tb.noErrors()
}
