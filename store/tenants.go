package store

import (
	"encoding/json"
	"fmt"
)

// TenantSettings are an operator's settings of one tenant of a queue
// (the jobs whose tenant header names it; "" is the jobs without one).
// A limit left nil is the queue's default for its tenants
// (QueueSettings.TenantConcurrency, ...).
type TenantSettings struct {
	Concurrency *int     `json:"concurrency,omitempty"` // nil = the queue's TenantConcurrency; 0 = no limit
	Rate        *float64 `json:"rate,omitempty"`        // nil = the queue's TenantRate; 0 = no limit
	Burst       *int     `json:"burst,omitempty"`       // nil = the queue's TenantBurst
	Weight      int      `json:"weight,omitempty"`      // share of dispatch turns; 0 = 1; at most MaxWeight
}

// MaxWeight bounds a tenant's weight.
const MaxWeight = 1000

// MaxTenantLen bounds a tenant's name.
const MaxTenantLen = 255

// IsZero reports settings that set nothing.
func (s TenantSettings) IsZero() bool {
	return s.Concurrency == nil && s.Rate == nil && s.Burst == nil && s.Weight == 0
}

// Validate reports the first setting out of range, naming it.
func (s TenantSettings) Validate() error {
	var concurrency, burst int
	var rate float64
	if s.Concurrency != nil {
		concurrency = *s.Concurrency
	}
	if s.Rate != nil {
		rate = *s.Rate
	}
	if s.Burst != nil {
		burst = *s.Burst
	}
	if err := checkLimits("", concurrency, rate, burst); err != nil {
		return err
	}
	if s.Weight < 0 || s.Weight > MaxWeight {
		return fmt.Errorf("%w: weight must be 0 (= 1) to %d, got %d", ErrBadSettings, MaxWeight, s.Weight)
	}
	return nil
}

// tenantKey is a tenant's key in the tenants bucket: its queue's name
// with its length in front, then the tenant's name (which may be empty).
func tenantKey(queue, tenant string) []byte {
	return append(queuePrefix(queue), tenant...)
}

// PutTenantSettings implements Journal.
func (jn *Core) PutTenantSettings(queue, tenant string, s TenantSettings, done func(error)) {
	err := s.Validate()
	switch {
	case err != nil:
	case queue == "" || len(queue) > MaxQueueLen:
		err = fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrBadSettings, MaxQueueLen, len(queue))
	case len(tenant) > MaxTenantLen:
		err = fmt.Errorf("%w: tenant name must be at most %d bytes, got %d", ErrBadSettings, MaxTenantLen, len(tenant))
	}
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	key := tenantKey(queue, tenant)
	var rec []byte
	if !s.IsZero() {
		rec, _ = json.Marshal(s) // plain fields: cannot fail
	}
	jn.enqueue(write{
		apply: func(t Tx) error {
			if rec == nil {
				return t.Delete(BucketTenants, key)
			}
			return t.Put(BucketTenants, key, rec)
		},
		finish: func(err error) {
			if done != nil {
				done(err)
			}
		},
		size: len(rec),
	})
}

// TenantSettings implements Journal.
func (jn *Core) TenantSettings() (map[string]map[string]TenantSettings, error) {
	out := make(map[string]map[string]TenantSettings)
	err := jn.view(func(t Tx) error {
		return t.Scan(BucketTenants, nil, func(k, v []byte) (bool, error) {
			if len(k) < 1 || len(k) < 1+int(k[0]) {
				return false, fmt.Errorf("%w: a tenant's settings under key %q, which names no queue", ErrCorrupt, k)
			}
			queue, tenant := string(k[1:1+k[0]]), string(k[1+k[0]:])
			var s TenantSettings
			if err := json.Unmarshal(v, &s); err != nil {
				return false, fmt.Errorf("%w: queue %q, tenant %q: its settings: %v", ErrCorrupt, queue, tenant, err)
			}
			if out[queue] == nil {
				out[queue] = make(map[string]TenantSettings)
			}
			out[queue][tenant] = s
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", jn.name, err)
	}
	return out, nil
}
