package zmtp

import (
	"sync"
	"time"
)

// Budget bounds the bytes of received frames that the connections sharing
// it hold at once: frames being read, and messages read but not yet
// released by their receiver. Before a frame's body is read its whole
// size is reserved, waiting while there is no room: the connection is
// not read meanwhile, and TCP holds its sender back. A reader that holds
// nothing yet may wait as long as it takes: others' messages end and give
// their room back. One that holds room for earlier frames of its message
// could wait for room others hold the same way, so it waits at most
// minGrace, then its connection is dropped and its room given back; and a
// message that could never fit whole is refused as too large. The body
// itself is allocated only once its first bytes arrive, so a frame
// announced and never sent holds room, not memory, and the reader's
// deadline (minRate) ends it.
//
// Frames up to smallFrame come from a pool of their own (an eighth of the
// budget), so that senders of large frames, slow ones included, cannot
// keep the usual small messages waiting. Frames of up to ArenaMax bytes
// are not counted: they are carved from a small per-connection arena.
type Budget struct {
	mu      sync.Mutex
	pools   [2]pool       // small, large
	changed chan struct{} // closed at the next release; nil while nobody waits
}

type pool struct{ max, used int64 }

// smallFrame is the largest frame taken from the small pool.
const smallFrame = 64 << 10

// Held is what one message holds of a budget; pass it to Release when the
// message's frames are no longer needed.
type Held struct{ small, large int64 }

// NewBudget makes a budget of max bytes.
func NewBudget(max int64) *Budget {
	small := max / 8
	return &Budget{pools: [2]pool{{max: small}, {max: max - small}}}
}

// Max is the largest frame the budget can ever hold: a larger one is
// refused as too large.
func (b *Budget) Max() uint64 { return uint64(b.pools[1].max) }

func poolOf(n int64) int {
	if n <= smallFrame {
		return 0
	}
	return 1
}

// acquire reserves n bytes, waiting for room until cancel is closed or
// timeout comes (nil: none); then it reports false.
func (b *Budget) acquire(n int64, cancel <-chan struct{}, timeout <-chan time.Time) bool {
	p := poolOf(n)
	for {
		b.mu.Lock()
		if pl := &b.pools[p]; pl.used+n <= pl.max || pl.used == 0 {
			pl.used += n
			b.mu.Unlock()
			return true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-cancel:
			return false
		case <-timeout:
			return false
		}
	}
}

// total is what h holds in all.
func (h Held) total() int64 { return h.small + h.large }

// sub uncounts what o holds from h.
func (h *Held) sub(o Held) { h.small, h.large = h.small-o.small, h.large-o.large }

// add counts a reservation of n bytes in h.
func (h *Held) add(n int64) {
	if poolOf(n) == 0 {
		h.small += n
	} else {
		h.large += n
	}
}

// Release gives back what a message held. A nil budget holds nothing.
func (b *Budget) Release(h Held) {
	if b == nil || h == (Held{}) {
		return
	}
	b.mu.Lock()
	b.pools[0].used -= h.small
	b.pools[1].used -= h.large
	if b.changed != nil { // wake the waiters: there may be room now
		close(b.changed)
		b.changed = nil
	}
	b.mu.Unlock()
}

// Used is how many bytes are held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pools[0].used + b.pools[1].used
}
