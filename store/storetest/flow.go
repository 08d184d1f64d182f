package storetest

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/eventmq/emq/store"
)

// Fair shares and named limiters (DESIGN.md, Flow control): tenants'
// settings and limiters, kept in the journal.

func (f *fixture) putTenant(queue, tenant string, s store.TenantSettings) error {
	f.t.Helper()
	_, err := store.Wait(func(done func(struct{}, error)) {
		f.j.PutTenantSettings(queue, tenant, s, func(err error) { done(struct{}{}, err) })
	})
	return err
}

func (f *fixture) tenantSettings() map[string]map[string]store.TenantSettings {
	f.t.Helper()
	m, err := f.j.TenantSettings()
	if err != nil {
		f.t.Fatalf("tenant settings: %v", err)
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// A tenant's settings are kept per queue, across a reopen, replaced
// whole; a limit set to 0 (no limit) is kept apart from one not set (the
// queue's default); the tenant "" (jobs without one) has its own; zero
// settings delete the tenant's.
func tenantSettingsAreKept(t *testing.T, f *fixture) {
	if got := f.tenantSettings(); len(got) != 0 {
		t.Fatalf("a new journal has tenant settings: %+v", got)
	}
	acme := store.TenantSettings{Concurrency: ptr(3), Rate: ptr(2.5), Burst: ptr(4), Weight: 5}
	free := store.TenantSettings{Concurrency: ptr(0), Rate: ptr(0.0)} // no limit, whatever the queue says
	none := store.TenantSettings{Weight: 2}
	for _, c := range []struct {
		queue, tenant string
		s             store.TenantSettings
	}{
		{"q", "acme", acme}, {"q", "free", free}, {"q", "", none}, {"q2", "acme", none}, {"q", "gone", acme},
		{"q", "acme", store.TenantSettings{Weight: 1}}, {"q", "acme", acme}, // replaced whole
		{"q", "gone", store.TenantSettings{}}, // deleted
		{"q", "never", store.TenantSettings{}},
	} {
		if err := f.putTenant(c.queue, c.tenant, c.s); err != nil {
			t.Fatalf("put %s/%q: %v", c.queue, c.tenant, err)
		}
	}
	want := map[string]map[string]store.TenantSettings{"q": {"acme": acme, "free": free, "": none}, "q2": {"acme": none}}
	if got := f.tenantSettings(); !reflect.DeepEqual(got, want) {
		t.Fatalf("tenant settings: %s, want %s", tenantsString(got), tenantsString(want))
	}
	f.reopen()
	if got := f.tenantSettings(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a reopen: %s, want %s", tenantsString(got), tenantsString(want))
	}
}

// tenantsString shows tenants' settings with what their pointers hold.
func tenantsString(m map[string]map[string]store.TenantSettings) string {
	show := func(p any) string {
		switch p := p.(type) {
		case *int:
			if p != nil {
				return fmt.Sprint(*p)
			}
		case *float64:
			if p != nil {
				return fmt.Sprint(*p)
			}
		}
		return "-"
	}
	var out []string
	for q, ts := range m {
		for tn, s := range ts {
			out = append(out, fmt.Sprintf("%s/%q{concurrency %s rate %s burst %s weight %d}", q, tn, show(s.Concurrency), show(s.Rate), show(s.Burst), s.Weight))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// Tenant settings out of range, or for a queue or tenant name no job
// could have, are refused with ErrBadSettings naming what is bad, and
// change nothing.
func badTenantSettingsAreRefused(t *testing.T, f *fixture) {
	kept := store.TenantSettings{Weight: 3}
	if err := f.putTenant("q", "t", kept); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		queue, tenant, name string
		s                   store.TenantSettings
	}{
		{"q", "t", "concurrency", store.TenantSettings{Concurrency: ptr(-1)}},
		{"q", "t", "concurrency", store.TenantSettings{Concurrency: ptr(store.MaxConcurrency + 1)}},
		{"q", "t", "rate", store.TenantSettings{Rate: ptr(-1.0)}},
		{"q", "t", "rate", store.TenantSettings{Rate: ptr(math.Inf(1))}},
		{"q", "t", "rate", store.TenantSettings{Rate: ptr(1e-9)}},
		{"q", "t", "burst", store.TenantSettings{Burst: ptr(store.MaxBurst + 1)}},
		{"q", "t", "weight", store.TenantSettings{Weight: -1}},
		{"q", "t", "weight", store.TenantSettings{Weight: store.MaxWeight + 1}},
		{"", "t", "queue name", kept},
		{strings.Repeat("x", store.MaxQueueLen+1), "t", "queue name", kept},
		{"q", strings.Repeat("x", store.MaxTenantLen+1), "tenant name", kept},
	} {
		err := f.putTenant(c.queue, c.tenant, c.s)
		if !errors.Is(err, store.ErrBadSettings) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s for %q/%q: err = %v, want ErrBadSettings naming %s",
				tenantsString(map[string]map[string]store.TenantSettings{"": {"": c.s}}), c.queue, c.tenant, err, c.name)
		}
	}
	want := map[string]map[string]store.TenantSettings{"q": {"t": kept}}
	if got := f.tenantSettings(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after refusals: %s, want %s", tenantsString(got), tenantsString(want))
	}
}

func (f *fixture) putLimiter(name string, s store.LimiterSettings) error {
	f.t.Helper()
	_, err := store.Wait(func(done func(struct{}, error)) {
		f.j.PutLimiter(name, s, func(err error) { done(struct{}{}, err) })
	})
	return err
}

func (f *fixture) removeLimiter(name string) bool {
	f.t.Helper()
	found, err := store.Wait(func(done func(bool, error)) { f.j.RemoveLimiter(name, done) })
	if err != nil {
		f.t.Fatalf("remove limiter %s: %v", name, err)
	}
	return found
}

func (f *fixture) limiters() map[string]store.LimiterSettings {
	f.t.Helper()
	m, err := f.j.Limiters()
	if err != nil {
		f.t.Fatalf("limiters: %v", err)
	}
	return m
}

// Limiters are kept by name across a reopen, replaced whole, and
// removed (found says whether there was one); bad ones are refused with
// ErrBadSettings naming what is bad, and change nothing.
func limitersAreKept(t *testing.T, f *fixture) {
	if got := f.limiters(); len(got) != 0 {
		t.Fatalf("a new journal has limiters: %+v", got)
	}
	stripe := store.LimiterSettings{Rate: 25, Burst: 5}
	gpu := store.LimiterSettings{Concurrency: 2}
	for name, s := range map[string]store.LimiterSettings{"stripe-api": stripe, "gpu": {Concurrency: 8, Rate: 1}, "old": gpu} {
		if err := f.putLimiter(name, s); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	if err := f.putLimiter("gpu", gpu); err != nil { // replaced whole
		t.Fatal(err)
	}
	if !f.removeLimiter("old") {
		t.Fatal("remove of a limiter: not found")
	}
	if f.removeLimiter("old") || f.removeLimiter("never") {
		t.Fatal("remove of no limiter: found")
	}
	for _, c := range []struct {
		limiter, name string
		s             store.LimiterSettings
	}{
		{"gpu", "limit something", store.LimiterSettings{}},
		{"gpu", "limit something", store.LimiterSettings{Burst: 3}},
		{"gpu", "concurrency", store.LimiterSettings{Concurrency: -1}},
		{"gpu", "rate", store.LimiterSettings{Rate: store.MaxRate + 1}},
		{"gpu", "rate", store.LimiterSettings{Rate: math.NaN()}},
		{"gpu", "burst", store.LimiterSettings{Rate: 1, Burst: -1}},
		{"", "limiter name", gpu},
		{strings.Repeat("x", store.MaxLimiterLen+1), "limiter name", gpu},
	} {
		err := f.putLimiter(c.limiter, c.s)
		if !errors.Is(err, store.ErrBadSettings) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("limiter %q %+v: err = %v, want ErrBadSettings naming %s", c.limiter, c.s, err, c.name)
		}
	}
	want := map[string]store.LimiterSettings{"stripe-api": stripe, "gpu": gpu}
	if got := f.limiters(); !reflect.DeepEqual(got, want) {
		t.Fatalf("limiters: %+v, want %+v", got, want)
	}
	f.reopen()
	if got := f.limiters(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a reopen: %+v, want %+v", got, want)
	}
}
