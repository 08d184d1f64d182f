package broker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// A queue's rate holds over ten seconds of the loop's clock: a bucket of
// burst 2 lets 2 + rate × seconds jobs go when the loop comes back at
// once for each token (its refill alarm), and within 5 % when the loop
// is late for its turns by up to a third of the wait (a busy loop): the
// second token absorbs a late turn. The clock is the test's, so the
// figure is exact, whatever the machine does meanwhile.
func TestRateLimitHoldsOverTenSeconds(t *testing.T) {
	t.Parallel()
	const rate, window = 20.0, int64(10 * time.Second)
	s := store.QueueSettings{Rate: rate, Burst: 2}
	for _, late := range []bool{false, true} {
		k := bucket{tokens: burst(s)}
		r := rand.New(rand.NewPCG(1, 2))
		n := 0
		for now := int64(0); now <= window; {
			ok, wait := k.ready(s.Rate, s.Burst, now)
			if ok {
				k.tokens-- // dispatched
				n++
				continue
			}
			now += int64(wait)
			if late {
				now += r.Int64N(int64(wait) / 3)
			}
		}
		want := 2 + rate*float64(window)/float64(time.Second)
		switch {
		case !late && float64(n) != want && float64(n) != want-1:
			t.Errorf("on time: %d jobs in 10 s at %g a second, want %.0f", n, rate, want)
		case late && (float64(n) < want*0.95 || float64(n) > want):
			t.Errorf("late turns: %d jobs in 10 s at %g a second, want %.0f - 5 %%", n, rate, want)
		}
	}
}
