package store

import (
	"encoding/json"
	"fmt"
	"math"
)

// QueueSettings are an operator's controls of one queue, kept in the
// journal so that they survive restarts. The zero value controls nothing.
type QueueSettings struct {
	// Paused: the queue takes and stores jobs but dispatches none.
	Paused bool `json:"paused,omitempty"`
	// Concurrency is the most jobs of the queue in flight at once, across
	// every worker; 0 = no limit.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is the most dispatches a second (a token bucket); 0 = no limit.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many dispatches the bucket holds: after a quiet
	// while, up to Burst go at once. 0 = 1.
	Burst int `json:"burst,omitempty"`

	// The defaults of each tenant of the queue (the jobs of one tenant
	// header; TenantSettings of a tenant overrides them): the most of its
	// jobs in flight at once (0 = no limit), the most of its dispatches a
	// second (0 = no limit), and its bucket's burst (0 = 1).
	TenantConcurrency int     `json:"tenant_concurrency,omitempty"`
	TenantRate        float64 `json:"tenant_rate,omitempty"`
	TenantBurst       int     `json:"tenant_burst,omitempty"`
}

// Limits of QueueSettings.
const (
	MaxConcurrency = 1 << 20
	MinRate        = 0.001 // a dispatch every 1,000 s
	MaxRate        = 1e6
	MaxBurst       = 1 << 20
)

// IsZero reports settings that control nothing.
func (s QueueSettings) IsZero() bool { return s == QueueSettings{} }

// Validate reports the first setting out of range, naming it.
func (s QueueSettings) Validate() error {
	if err := checkLimits("", s.Concurrency, s.Rate, s.Burst); err != nil {
		return err
	}
	return checkLimits("tenant-", s.TenantConcurrency, s.TenantRate, s.TenantBurst)
}

// checkLimits checks a concurrency, a rate and a burst against the
// limits of QueueSettings; an error names the setting, prefix first.
func checkLimits(prefix string, concurrency int, rate float64, burst int) error {
	switch {
	case concurrency < 0 || concurrency > MaxConcurrency:
		return fmt.Errorf("%w: %sconcurrency must be 0 (no limit) to %d, got %d", ErrBadSettings, prefix, MaxConcurrency, concurrency)
	case math.IsNaN(rate) || rate < 0 || rate > MaxRate || rate > 0 && rate < MinRate:
		return fmt.Errorf("%w: %srate must be 0 (no limit) or %g to %g a second, got %g", ErrBadSettings, prefix, MinRate, float64(MaxRate), rate)
	case burst < 0 || burst > MaxBurst:
		return fmt.Errorf("%w: %sburst must be 0 to %d, got %d", ErrBadSettings, prefix, MaxBurst, burst)
	}
	return nil
}

// PutQueueSettings implements Journal.
func (jn *Core) PutQueueSettings(queue string, s QueueSettings, done func(error)) {
	err := s.Validate()
	if err == nil && (queue == "" || len(queue) > MaxQueueLen) {
		err = fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrBadSettings, MaxQueueLen, len(queue))
	}
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	key := []byte(queue)
	rec, _ := json.Marshal(s) // plain fields: cannot fail
	jn.enqueue(write{
		apply: func(t Tx) error { return t.Put(BucketQueues, key, rec) },
		finish: func(err error) {
			if done != nil {
				done(err)
			}
		},
		size: len(rec),
	})
}

// QueueSettings implements Journal.
func (jn *Core) QueueSettings() (map[string]QueueSettings, error) {
	out := make(map[string]QueueSettings)
	err := jn.view(func(t Tx) error {
		return t.Scan(BucketQueues, nil, func(k, v []byte) (bool, error) {
			var s QueueSettings
			if err := json.Unmarshal(v, &s); err != nil {
				return false, fmt.Errorf("%w: queue %q's settings: %v", ErrCorrupt, k, err)
			}
			out[string(k)] = s
			return true, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", jn.name, err)
	}
	return out, nil
}
