package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/internal/zmtp"
)

// PubSubOptions say what to measure of pub/sub: one publisher (a
// client.Client) sends Messages of Size bytes as fast as it can; each of
// Subscribers SUB connections receives every one. Stuck more subscribers
// subscribe and never read.
type PubSubOptions struct {
	Frontend, Outgoing string // a running broker's frontend and publisher-outgoing; "" = start one
	Subscribers        int
	Stuck              int
	Messages           int
	Size               int // at least 8: the payload carries its send time
	// HWM is the own broker's subscriber-hwm; 0 = enough for the whole run
	// (Messages), so that a drop means a fault, not a slow reader.
	HWM int
}

// PubSubResult is what was measured; times in milliseconds.
type PubSubResult struct {
	Messages       int     `json:"messages"`
	Subscribers    int     `json:"subscribers"`
	Stuck          int     `json:"stuck,omitempty"`
	Size           int     `json:"size"`
	Delivered      int64   `json:"delivered"` // messages received, summed over the reading subscribers
	Expected       int64   `json:"expected"`
	Seconds        float64 `json:"seconds"` // first publish to last delivery
	DeliveriesPerS float64 `json:"deliveries_per_sec"`
	PublishPerS    float64 `json:"publish_per_sec"` // messages the publisher wrote a second
	P50            float64 `json:"p50_ms"`          // publish → received
	P99            float64 `json:"p99_ms"`
	Max            float64 `json:"max_ms"`
	RSSMiB         float64 `json:"rss_mib"`
}

// RunPubSub measures.
func RunPubSub(ctx context.Context, o PubSubOptions) (PubSubResult, error) {
	if o.Subscribers < 1 || o.Messages < 1 || o.Size < 8 || o.Stuck < 0 {
		return PubSubResult{}, fmt.Errorf("bench: subscribers and messages must be at least 1, size at least 8")
	}
	if (o.Frontend == "") != (o.Outgoing == "") {
		return PubSubResult{}, fmt.Errorf("bench: give the frontend and publisher-outgoing endpoints, or neither")
	}
	var own *broker.Broker
	if o.Frontend == "" {
		b, stop, err := startPubSubBroker(ctx, &o)
		if err != nil {
			return PubSubResult{}, err
		}
		defer stop()
		own = b
	}
	base := time.Now()
	var (
		wg     sync.WaitGroup
		got    atomic.Int64
		lastRx atomic.Int64
		lats   = make([][]time.Duration, o.Subscribers)
		target = int64(o.Subscribers) * int64(o.Messages)
		all    = make(chan struct{})
		once   sync.Once
	)
	var conns []*zmtp.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	for i := range o.Subscribers + o.Stuck {
		c, err := zmtp.Dial(ctx, o.Outgoing, zmtp.DialOptions{Sub: true})
		if err != nil {
			return PubSubResult{}, err
		}
		conns = append(conns, c)
		if err := c.WriteMsgs([][]byte{{1}}); err != nil { // every topic
			return PubSubResult{}, err
		}
		if i >= o.Subscribers {
			continue // stuck: never reads
		}
		lats[i] = make([]time.Duration, 0, o.Messages)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				f, err := c.ReadMsg()
				if err != nil {
					return
				}
				now := time.Since(base)
				if len(f) == 2 && len(f[1]) >= 8 {
					lats[i] = append(lats[i], now-time.Duration(binary.BigEndian.Uint64(f[1])))
				}
				for old := lastRx.Load(); int64(now) > old && !lastRx.CompareAndSwap(old, int64(now)); old = lastRx.Load() {
				}
				if got.Add(1) == target {
					once.Do(func() { close(all) })
				}
			}
		}()
	}
	pub, err := client.New(client.Options{Broker: o.Frontend})
	if err != nil {
		return PubSubResult{}, err
	}
	if err := waitSubscriptions(ctx, own, o.Subscribers+o.Stuck); err != nil {
		pub.Close()
		return PubSubResult{}, err
	}

	start := time.Now()
	for range o.Messages {
		payload := make([]byte, o.Size)
		binary.BigEndian.PutUint64(payload, uint64(time.Since(base)))
		if err := pub.Publish(ctx, "bench", payload); err != nil {
			pub.Close()
			return PubSubResult{}, err
		}
	}
	pub.Close() // writes what is queued
	pubEnd := time.Now()

	for {
		before := got.Load()
		select {
		case <-all:
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return PubSubResult{}, ctx.Err()
		}
		if n := got.Load(); n == target || n == before {
			break
		}
	}
	res := PubSubResult{Messages: o.Messages, Subscribers: o.Subscribers, Stuck: o.Stuck, Size: o.Size,
		Delivered: got.Load(), Expected: target}
	elapsed := base.Add(time.Duration(lastRx.Load())).Sub(start)
	res.Seconds = elapsed.Seconds()
	if res.Delivered > 0 && elapsed > 0 {
		res.DeliveriesPerS = float64(res.Delivered) / elapsed.Seconds()
	}
	res.PublishPerS = float64(o.Messages) / pubEnd.Sub(start).Seconds()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	conns = nil
	var d []time.Duration
	for _, l := range lats {
		d = append(d, l...)
	}
	res.P50, res.P99, _, res.Max = percentiles(d)
	res.RSSMiB = RSSMiB("self")
	return res, nil
}

// waitSubscriptions waits until the broker has n subscriptions, when it is
// the bench's own (b); subscriptions travel asynchronously, and another
// broker's count is not read here, so there they get a second.
func waitSubscriptions(ctx context.Context, b *broker.Broker, n int) error {
	if b == nil {
		select {
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.PubSub().Subscriptions < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the broker has %d of %d subscriptions after 10 s", b.PubSub().Subscriptions, n)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

func startPubSubBroker(ctx context.Context, o *PubSubOptions) (*broker.Broker, func(), error) {
	b, stop, err := runBroker(ctx, func(opts *broker.Options) error {
		opts.PublisherOutgoing = "tcp://127.0.0.1:0"
		opts.SubscriberHWM = o.HWM
		if opts.SubscriberHWM == 0 {
			opts.SubscriberHWM = o.Messages
			// Each subscriber may hold a quarter: 4 whole runs, or one each.
			opts.PublisherBuffer = max(opts.PublisherBuffer, int64(max(4, o.Subscribers+o.Stuck))*int64(o.Messages)*int64(o.Size+32))
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	o.Frontend, o.Outgoing = b.Frontend(), b.PublisherOutgoing()
	return b, stop, nil
}
