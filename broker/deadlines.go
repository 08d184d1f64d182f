package broker

import "time"

// Everything the loop must do at a time lives in one heap of deadlines,
// and the loop sleeps until the earliest: no tick, no scan. Each owner
// has at most one deadline at a time:
//
//	*job     delayed: due at notBefore (delay header, retry backoff);
//	         in flight with timeout:N: due when the timeout passes
//	*peer    due HeartbeatTimeout after it was last heard (checked again
//	         when due: a peer heard since is given a new deadline)
//	*alarm   the broker's own: the heartbeat to every peer, the sweep of
//	         expired results, the end of a drain
//
// A million delayed jobs cost a million heap entries and nothing while
// they wait.

// deadline is an owner's place in the heap.
type deadline struct {
	at   int64 // on the broker's monotonic clock (Broker.at)
	slot int   // 1 + index in the heap; 0 = not scheduled
}

// timed is what has a deadline.
type timed interface{ deadline() *deadline }

func (j *job) deadline() *deadline  { return &j.due }
func (p *peer) deadline() *deadline { return &p.due }

// alarm is one of the broker's own deadlines; fire runs when it is due.
type alarm struct {
	due  deadline
	fire func(now time.Time)
}

func (t *alarm) deadline() *deadline { return &t.due }

// deadlines is a binary min-heap on at.
type deadlines []timed

func (h deadlines) len() int { return len(h) }

// next returns the earliest deadline.
func (h deadlines) next() (at int64, ok bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].deadline().at, true
}

// set schedules x at at, or moves it there if it is scheduled.
func (h *deadlines) set(x timed, at int64) {
	d := x.deadline()
	if d.slot == 0 {
		*h = append(*h, x)
		d.slot = len(*h)
		d.at = at
		h.up(d.slot - 1)
		return
	}
	old := d.at
	d.at = at
	if at < old {
		h.up(d.slot - 1)
	} else {
		h.down(d.slot - 1)
	}
}

// stop unschedules x; it does nothing when x is not scheduled.
func (h *deadlines) stop(x timed) {
	d := x.deadline()
	if d.slot == 0 {
		return
	}
	i, last := d.slot-1, len(*h)-1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	d.slot = 0
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// popDue removes and returns the earliest deadline if it is at or before
// now.
func (h *deadlines) popDue(now int64) (timed, bool) {
	if len(*h) == 0 || (*h)[0].deadline().at > now {
		return nil, false
	}
	x := (*h)[0]
	h.stop(x)
	return x, true
}

// removeIf unschedules every x that drop reports, in one pass (a purge of
// a queue's delayed jobs).
func (h *deadlines) removeIf(drop func(timed) bool) {
	kept := (*h)[:0]
	for _, x := range *h {
		if drop(x) {
			x.deadline().slot = 0
			continue
		}
		kept = append(kept, x)
		x.deadline().slot = len(kept)
	}
	clear((*h)[len(kept):])
	*h = kept
	for i := len(kept)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h deadlines) less(i, k int) bool { return h[i].deadline().at < h[k].deadline().at }

func (h deadlines) swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].deadline().slot = i + 1
	h[k].deadline().slot = k + 1
}

func (h deadlines) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h deadlines) down(i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, least) {
			least = l
		}
		if r < len(h) && h.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}
