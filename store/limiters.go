package store

import (
	"encoding/json"
	"fmt"
)

// LimiterSettings are a named limiter's: every job that names it
// (header limit:) takes a share of it, whatever its queue.
type LimiterSettings struct {
	Concurrency int     `json:"concurrency,omitempty"` // most jobs naming it in flight at once; 0 = no limit
	Rate        float64 `json:"rate,omitempty"`        // most dispatches a second; 0 = no limit
	Burst       int     `json:"burst,omitempty"`       // 0 = 1
}

// MaxLimiterLen bounds a limiter's name.
const MaxLimiterLen = 255

// Validate reports the first setting out of range, naming it, or a
// limiter that limits nothing.
func (s LimiterSettings) Validate() error {
	if err := checkLimits("", s.Concurrency, s.Rate, s.Burst); err != nil {
		return err
	}
	if s.Concurrency == 0 && s.Rate == 0 {
		return fmt.Errorf("%w: a limiter must limit something: set its concurrency or its rate", ErrBadSettings)
	}
	return nil
}

// PutLimiter implements Journal.
func (jn *Core) PutLimiter(name string, s LimiterSettings, done func(error)) {
	err := s.Validate()
	if err == nil && (name == "" || len(name) > MaxLimiterLen) {
		err = fmt.Errorf("%w: limiter name must be 1 to %d bytes, got %d", ErrBadSettings, MaxLimiterLen, len(name))
	}
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	key := []byte(name)
	rec, _ := json.Marshal(s) // plain fields: cannot fail
	jn.enqueue(write{
		apply: func(t Tx) error { return t.Put(BucketLimiters, key, rec) },
		finish: func(err error) {
			if done != nil {
				done(err)
			}
		},
		size: len(rec),
	})
}

// RemoveLimiter implements Journal.
func (jn *Core) RemoveLimiter(name string, done func(found bool, err error)) {
	key := []byte(name)
	var found bool
	jn.enqueue(write{
		apply: func(t Tx) error {
			if found = t.Get(BucketLimiters, key) != nil; !found {
				return nil
			}
			return t.Delete(BucketLimiters, key)
		},
		reads: []Key{{Bucket: BucketLimiters, Key: key}},
		finish: func(err error) {
			if done != nil {
				done(found && err == nil, err)
			}
		},
	})
}

// Limiters implements Journal.
func (jn *Core) Limiters() (map[string]LimiterSettings, error) {
	out := make(map[string]LimiterSettings)
	err := jn.view(func(t Tx) error {
		return t.Scan(BucketLimiters, nil, func(k, v []byte) (bool, error) {
			var s LimiterSettings
			if err := json.Unmarshal(v, &s); err != nil {
				return false, fmt.Errorf("%w: limiter %q's settings: %v", ErrCorrupt, k, err)
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
