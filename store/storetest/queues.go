package storetest

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/eventmq/emq/store"
)

func (f *fixture) putQueue(queue string, s store.QueueSettings) error {
	f.t.Helper()
	_, err := store.Wait(func(done func(struct{}, error)) {
		f.j.PutQueueSettings(queue, s, func(err error) { done(struct{}{}, err) })
	})
	return err
}

func (f *fixture) queueSettings() map[string]store.QueueSettings {
	f.t.Helper()
	m, err := f.j.QueueSettings()
	if err != nil {
		f.t.Fatalf("queue settings: %v", err)
	}
	return m
}

// An operator's queue controls are kept across a reopen and replaced
// whole; zero settings are kept too.
func queueSettingsAreKept(t *testing.T, f *fixture) {
	if got := f.queueSettings(); len(got) != 0 {
		t.Fatalf("a new journal has queue settings: %+v", got)
	}
	emails := store.QueueSettings{Paused: true, Concurrency: 4, Rate: 2.5, Burst: 10, TenantConcurrency: 2, TenantRate: 0.5, TenantBurst: 3}
	reports := store.QueueSettings{Concurrency: 1}
	for q, s := range map[string]store.QueueSettings{"emails": emails, "reports": reports, "gone": {Paused: true}} {
		if err := f.putQueue(q, s); err != nil {
			t.Fatalf("put %s: %v", q, err)
		}
	}
	if err := f.putQueue("gone", store.QueueSettings{}); err != nil { // resumed, no limits
		t.Fatalf("zero settings: %v", err)
	}
	reports.Concurrency = 2
	if err := f.putQueue("reports", reports); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	want := map[string]store.QueueSettings{"emails": emails, "reports": reports, "gone": {}}
	if got := f.queueSettings(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a reopen: %+v, want %+v", got, want)
	}
}

// Settings out of range, or for a queue name no job could have, are
// refused with ErrBadSettings naming the setting, and change nothing.
func badQueueSettingsAreRefused(t *testing.T, f *fixture) {
	if err := f.putQueue("q", store.QueueSettings{Concurrency: 3}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		queue, name string
		s           store.QueueSettings
	}{
		{"q", "concurrency", store.QueueSettings{Concurrency: -1}},
		{"q", "rate", store.QueueSettings{Rate: -2}},
		{"q", "rate", store.QueueSettings{Rate: store.MaxRate * 2}},
		{"q", "rate", store.QueueSettings{Rate: 1e-11}},
		{"q", "burst", store.QueueSettings{Burst: -1}},
		{"q", "tenant-concurrency", store.QueueSettings{TenantConcurrency: store.MaxConcurrency + 1}},
		{"q", "tenant-rate", store.QueueSettings{TenantRate: math.NaN()}},
		{"q", "tenant-rate", store.QueueSettings{TenantRate: 1e-5}},
		{"q", "tenant-burst", store.QueueSettings{TenantBurst: -3}},
		{"", "queue name", store.QueueSettings{Paused: true}},
		{strings.Repeat("x", store.MaxQueueLen+1), "queue name", store.QueueSettings{Paused: true}},
	} {
		err := f.putQueue(c.queue, c.s)
		if !errors.Is(err, store.ErrBadSettings) || !errors.Is(err, store.ErrInvalidJob) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v for %q: err = %v, want ErrBadSettings naming %s", c.s, c.queue, err, c.name)
		}
	}
	want := map[string]store.QueueSettings{"q": {Concurrency: 3}}
	if got := f.queueSettings(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after refusals: %+v, want %+v", got, want)
	}
}
