package store

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Schedule is a job to make again and again: every Every, or at the times
// of a Cron expression. The broker decides when (Next); the journal keeps
// it, and makes each fire's job in the same transaction that moves Next
// on (FireSchedule), so that no fire is lost or made twice.
type Schedule struct {
	ID       string
	Queue    string
	Headers  string // the SCHEDULE's headers frame, given to each fire's job
	Payload  []byte
	Every    time.Duration // the interval; 0 for a cron schedule
	Cron     string        // a cron expression, or ""
	Next     time.Time     // when it is due next
	LastFire time.Time     // the due time of the last fire; zero = none yet
	Fires    int           // how many it has made
	Left     int           // fires left before it ends; -1 = no end
	Paused   bool
	Created  time.Time
}

const scheduleVersion = 1

// encode writes a schedule's record: version, paused, then varints (every,
// next, last fire, created, fires, left) and the queue, headers, cron and
// payload, each with its length.
func (s *Schedule) encode() []byte {
	b := make([]byte, 0, 2+6*binary.MaxVarintLen64+len(s.Queue)+len(s.Headers)+len(s.Cron)+len(s.Payload)+4*binary.MaxVarintLen64)
	paused := byte(0)
	if s.Paused {
		paused = 1
	}
	b = append(b, scheduleVersion, paused)
	b = binary.AppendVarint(b, int64(s.Every))
	b = binary.AppendVarint(b, unixNano(s.Next))
	b = binary.AppendVarint(b, unixNano(s.LastFire))
	b = binary.AppendVarint(b, unixNano(s.Created))
	b = binary.AppendVarint(b, int64(s.Fires))
	b = binary.AppendVarint(b, int64(s.Left))
	for _, f := range [][]byte{[]byte(s.Queue), []byte(s.Headers), []byte(s.Cron), s.Payload} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// decodeSchedule reads a record, copying everything out of it.
func decodeSchedule(id, b []byte) (*Schedule, error) {
	if len(b) < 2 || b[0] != scheduleVersion {
		return nil, fmt.Errorf("%w: the record of schedule %q has an unknown version", ErrCorrupt, id)
	}
	s := &Schedule{ID: string(id), Paused: b[1] == 1}
	r := reader{b: b[2:]}
	s.Every = time.Duration(r.varint())
	s.Next, s.LastFire, s.Created = fromUnixNano(r.varint()), fromUnixNano(r.varint()), fromUnixNano(r.varint())
	s.Fires, s.Left = int(r.varint()), int(r.varint())
	s.Queue = string(r.bytes())
	s.Headers = string(r.bytes())
	s.Cron = string(r.bytes())
	s.Payload = clone(r.bytes())
	if r.bad {
		return nil, fmt.Errorf("%w: the record of schedule %q is truncated", ErrCorrupt, id)
	}
	return s, nil
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
