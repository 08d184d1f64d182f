package broker

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/eventmq/emq/store"
)

// Changes of tenants' settings and limiters, as controls.go's of queues:
// each builds on the latest written (the next maps hold what is being
// written, with its writes under way) and applies once the journal has
// it.

type tenantKey struct{ queue, tenant string }

type pendingTenant struct {
	next   store.TenantSettings
	writes int
}

type pendingLimiter struct {
	next   store.LimiterSettings
	gone   bool // being removed
	writes int
}

// TenantChange changes some of a tenant's own settings; nil fields stay
// as they are. Default sets a limit back to the queue's default.
type TenantChange struct {
	Concurrency *int     `json:"concurrency,omitempty"`
	Rate        *float64 `json:"rate,omitempty"`
	Burst       *int     `json:"burst,omitempty"`
	Weight      *int     `json:"weight,omitempty"`
	// Default names fields ("concurrency", "rate", "burst", "weight") to
	// set back to the queue's default.
	Default []string `json:"default,omitempty"`
}

// Apply returns s with c's fields.
func (c TenantChange) Apply(s store.TenantSettings) (store.TenantSettings, error) {
	if c.Concurrency != nil {
		s.Concurrency = c.Concurrency
	}
	if c.Rate != nil {
		s.Rate = c.Rate
	}
	if c.Burst != nil {
		s.Burst = c.Burst
	}
	if c.Weight != nil {
		s.Weight = *c.Weight
	}
	for _, f := range c.Default {
		switch f {
		case "concurrency":
			s.Concurrency = nil
		case "rate":
			s.Rate = nil
		case "burst":
			s.Burst = nil
		case "weight":
			s.Weight = 0
		default:
			return s, fmt.Errorf("%w: %q is not a tenant setting (concurrency, rate, burst, weight)", store.ErrBadSettings, f)
		}
	}
	return s, s.Validate()
}

// ChangeTenant changes one tenant's own settings in queue, and returns
// them once the journal has them. Bad settings wrap store.ErrBadSettings.
func (b *Broker) ChangeTenant(ctx context.Context, queue, tenant string, c TenantChange) (store.TenantSettings, error) {
	return change(ctx, b, func(reply func(store.TenantSettings, error)) {
		k := tenantKey{queue, tenant}
		p, ok := b.tenantNext[k]
		if !ok {
			p.next = b.tenantSet[queue][tenant]
		}
		next, err := c.Apply(p.next)
		if err != nil {
			reply(store.TenantSettings{}, err)
			return
		}
		b.tenantNext[k] = pendingTenant{next, p.writes + 1}
		b.journal.PutTenantSettings(queue, tenant, next, func(err error) {
			if p := b.tenantNext[k]; p.writes > 1 {
				b.tenantNext[k] = pendingTenant{p.next, p.writes - 1}
			} else {
				delete(b.tenantNext, k)
			}
			if err != nil {
				b.noticeFence(err)
				reply(store.TenantSettings{}, err)
				return
			}
			b.applyTenant(queue, tenant, next)
			b.emit(Event{Kind: EventTenant, Queue: queue, Reason: tenant})
			reply(next, nil)
		})
	})
}

// TenantSettings returns the own settings of queue's tenants, by name, as
// the journal has them.
func (b *Broker) TenantSettings(ctx context.Context, queue string) (map[string]store.TenantSettings, error) {
	return query(ctx, b, func() map[string]store.TenantSettings { return maps.Clone(b.tenantSet[queue]) })
}

// applyTenant makes s the own settings of a tenant, and lets go what
// they now allow.
func (b *Broker) applyTenant(queue, name string, s store.TenantSettings) {
	m := b.tenantSet[queue]
	switch {
	case s.IsZero():
		delete(m, name)
		if len(m) == 0 {
			delete(b.tenantSet, queue)
		}
	case m == nil:
		b.tenantSet[queue] = map[string]store.TenantSettings{name: s}
	default:
		m[name] = s
	}
	if q := b.queues[queue]; q != nil {
		if t := q.tenants[name]; t != nil {
			b.setLimits(t)
			b.unblock(t)
		}
	}
}

// retenant works out the limits of every tenant of q again, after its
// defaults changed.
func (b *Broker) retenant(q *queue) {
	for _, t := range q.tenants {
		b.setLimits(t)
		b.unblock(t)
	}
}

// SetLimiter makes or changes a named limiter, and returns once the
// journal has it. Bad settings wrap store.ErrBadSettings.
func (b *Broker) SetLimiter(ctx context.Context, name string, s store.LimiterSettings) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		if err := s.Validate(); err != nil {
			reply(struct{}{}, err)
			return
		}
		b.writeLimiter(name, s, false, reply)
	})
	return err
}

// RemoveLimiter removes a named limiter; the jobs that name it run
// without it, and new REQUESTs naming it are refused. store.ErrNotFound
// when there is none.
func (b *Broker) RemoveLimiter(ctx context.Context, name string) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		p, pending := b.limiterNext[name]
		if b.limiters[name] == nil && (!pending || p.gone) {
			reply(struct{}{}, fmt.Errorf("limiter %q: %w", name, store.ErrNotFound))
			return
		}
		b.writeLimiter(name, store.LimiterSettings{}, true, reply)
	})
	return err
}

func (b *Broker) writeLimiter(name string, s store.LimiterSettings, gone bool, reply func(struct{}, error)) {
	p := b.limiterNext[name]
	b.limiterNext[name] = pendingLimiter{s, gone, p.writes + 1}
	landed := func(err error) {
		if p := b.limiterNext[name]; p.writes > 1 {
			b.limiterNext[name] = pendingLimiter{p.next, p.gone, p.writes - 1}
		} else {
			delete(b.limiterNext, name)
		}
		if err != nil {
			b.noticeFence(err)
			reply(struct{}{}, err)
			return
		}
		if gone {
			b.dropLimiter(name)
		} else {
			b.applyLimiter(name, s)
		}
		b.emit(Event{Kind: EventLimiter, Reason: name})
		reply(struct{}{}, nil)
	}
	if gone {
		b.journal.RemoveLimiter(name, func(_ bool, err error) { landed(err) })
		return
	}
	b.journal.PutLimiter(name, s, landed)
}

// LimiterInfo describes a named limiter.
type LimiterInfo struct {
	Name string `json:"name"`
	store.LimiterSettings
	InFlight int `json:"in_flight"` // jobs naming it held by workers
	Waiting  int `json:"waiting"`   // jobs waiting in its line for room
}

// Limiters describes every named limiter, by name.
func (b *Broker) Limiters(ctx context.Context) ([]LimiterInfo, error) {
	return query(ctx, b, func() []LimiterInfo {
		out := make([]LimiterInfo, 0, len(b.limiters))
		for _, lm := range b.limiters {
			out = append(out, LimiterInfo{Name: lm.name, InFlight: lm.running, Waiting: lm.line.len() - lm.stale,
				LimiterSettings: store.LimiterSettings{Concurrency: lm.lim.concurrency, Rate: lm.lim.rate, Burst: lm.lim.burst}})
		}
		sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
		return out
	})
}

// TenantInfo describes one tenant of a queue.
type TenantInfo struct {
	Name     string `json:"name"`
	Pending  int    `json:"pending"`   // ready to run or waiting for room
	InFlight int    `json:"in_flight"` // held by workers
	// Its limits as they apply (its own settings over the queue's
	// defaults; 0 = no limit) and its weight.
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Burst       int     `json:"burst,omitempty"`
	Weight      int     `json:"weight"`
	// Own is what the tenant has of its own (the rest is the queue's).
	Own store.TenantSettings `json:"own"`
	// Blocked: at its concurrency or rate, its jobs wait.
	Blocked bool `json:"blocked,omitempty"`
}

// TenantPage is one page of a queue's tenants, the largest backlog first.
type TenantPage struct {
	Tenants []TenantInfo `json:"tenants"`
	Total   int          `json:"total"` // tenants in all
	Next    int          `json:"next"`  // offset of the next page; 0 = none
}

// Tenants lists a queue's tenants that have jobs or settings of their
// own: up to limit (0 = 100) from offset, the largest backlog first (then
// by name).
func (b *Broker) Tenants(ctx context.Context, qname string, offset, limit int) (TenantPage, error) {
	if limit <= 0 {
		limit = 100
	}
	return query(ctx, b, func() TenantPage {
		// Sorted as pointers, and described only for the page: a queue
		// may have 100,000 tenants.
		own := b.tenantSet[qname]
		var all []*tenant
		if q := b.queues[qname]; q != nil {
			all = make([]*tenant, 0, len(q.tenants)+len(own))
			for _, t := range q.tenants {
				all = append(all, t)
			}
		}
		for name := range own {
			if q := b.queues[qname]; q == nil || q.tenants[name] == nil {
				t := &tenant{name: name, q: &queue{name: qname, set: b.controls[qname]}}
				b.setLimits(t)
				all = append(all, t)
			}
		}
		slices.SortFunc(all, func(x, y *tenant) int {
			if c := cmp.Compare(y.pending, x.pending); c != 0 {
				return c
			}
			return strings.Compare(x.name, y.name)
		})
		page := TenantPage{Total: len(all)}
		if offset < len(all) {
			for _, t := range all[offset:min(len(all), offset+limit)] {
				page.Tenants = append(page.Tenants, TenantInfo{Name: t.name, Pending: t.pending, InFlight: t.running,
					Concurrency: t.lim.concurrency, Rate: t.lim.rate, Burst: t.lim.burst, Weight: t.weight,
					Own: own[t.name], Blocked: t.blocked})
			}
			if offset+limit < len(all) {
				page.Next = offset + limit
			}
		}
		return page
	})
}

// FlowInfo counts what flow control holds back now, without a series per
// tenant or limiter: tenants with jobs pending, tenants at their limit,
// limiters without room, and the jobs waiting in limiters' lines.
type FlowInfo struct {
	TenantsWithBacklog int `json:"tenants_with_backlog"`
	TenantsBlocked     int `json:"tenants_blocked"`
	LimitersFull       int `json:"limiters_full"`
	LimiterWaiting     int `json:"limiter_waiting"`
}

// Flow counts what flow control holds back now. It looks at every tenant
// held: for a scrape now and then, not for each job.
func (b *Broker) Flow(ctx context.Context) (FlowInfo, error) {
	return query(ctx, b, func() FlowInfo {
		var f FlowInfo
		for _, q := range b.queues {
			for _, t := range q.tenants {
				if t.pending > 0 {
					f.TenantsWithBacklog++
				}
				if t.blocked {
					f.TenantsBlocked++
				}
			}
		}
		for _, lm := range b.limiters {
			if lm.lim.concurrency > 0 && lm.running >= lm.lim.concurrency || lm.line.len() > lm.stale {
				f.LimitersFull++
			}
			f.LimiterWaiting += lm.line.len() - lm.stale
		}
		return f
	})
}
