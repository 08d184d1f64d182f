package broker

import (
	"errors"
	"fmt"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
)

// Pub/sub (see doc.go): PUBLISH, on the frontend or on PublisherIncoming,
// is fanned out by the reader goroutine that received it, straight to
// the PUB endpoint's subscriber queues. It never enters the loop, the
// journal or the inbox: nothing about it is durable, and it cannot delay
// a job.

// startPubSub binds the PUB endpoint and the publisher ROUTER.
func (b *Broker) startPubSub() error {
	if b.opts.PublisherOutgoing == "" {
		return nil
	}
	p, err := zmtp.ListenPub(b.opts.PublisherOutgoing, zmtp.PubOptions{
		HWM:             b.opts.SubscriberHWM,
		MaxBytes:        b.opts.PublisherBuffer,
		MaxSubscribers:  b.opts.MaxSubscribers,
		LastValue:       b.opts.PublisherLastValue,
		LastValueTopics: b.opts.LastValueTopics,
		LastValueBytes:  b.opts.LastValueBytes,
		Limit:           b.conns,
		Logger:          b.log,
		Security:        b.serverSecurity(RoleSubscriber),
	})
	if err != nil {
		return fmt.Errorf("publisher-outgoing: %w", err)
	}
	b.pub.Store(p)
	if b.opts.PublisherIncoming == "" {
		return nil
	}
	r, err := zmtp.Listen(b.opts.PublisherIncoming, zmtp.Options{
		MaxFrameSize: b.opts.MaxFrameSize,
		Budget:       b.budget,
		Limit:        b.conns,
		Logger:       b.log,
		Security:     b.serverSecurity(0),
		Check:        b.checkRoles(frontend),
		Receive:      b.publisherReceive,
	})
	if err != nil {
		return fmt.Errorf("publisher-incoming: %w", err)
	}
	b.pubIn.Store(r)
	return nil
}

func (b *Broker) stopPubSub() {
	if r := b.pubIn.Load(); r != nil {
		r.Close()
	}
	if p := b.pub.Load(); p != nil {
		p.Close()
	}
}

// publisherReceive takes a message on PublisherIncoming, EventMQ's
// emq-pubsub address: PUBLISH only.
func (b *Broker) publisherReceive(id string, frames [][]byte, held zmtp.Held) {
	defer b.budget.Release(held)
	m, err := emqp.Decode(frames)
	switch m.(type) {
	case *emqp.Publish:
		if code, text := b.publishRefusal(frames[4], frames[5]); code != "" {
			b.pubRefuse(id, m.ID(), code, text)
			return
		}
		b.pub.Load().Publish(frames[4], frames[5])
	case *emqp.Heartbeat, *emqp.Kbye, *emqp.Disconnect:
	default:
		code, ref := protocolCode(err)
		if err == nil {
			ref = m.ID()
			err = fmt.Errorf("%s: the publisher endpoint takes PUBLISH only; send it to the frontend %s", m.Command(), b.Frontend())
		}
		b.pubRefuse(id, ref, code, err.Error())
		b.pubLog.Warn(b.log, "protocol error", "code", code, "peer", "publisher/"+printableID(id), "err", err)
	}
}

// publishRefusal says why a PUBLISH of topic and msg cannot be fanned
// out, or returns "" when it can.
func (b *Broker) publishRefusal(topic, msg []byte) (code, text string) {
	if b.pub.Load() == nil {
		return emqp.CodeUnavailable, "pub/sub is off on this broker (publisher-outgoing is empty)"
	}
	// As the subscriber queues count it: with two frame headers.
	if n := int64(len(topic) + len(msg) + 18); n > b.opts.PublisherBuffer/4 {
		return emqp.CodeTooLarge, fmt.Sprintf("PUBLISH of %d bytes is over a quarter of publisher-buffer (%d bytes), the most one subscriber may have queued", n, b.opts.PublisherBuffer)
	}
	return "", ""
}

// frontendPublish fans out a PUBLISH received on the frontend or backend,
// from the connection's reader. A refused one goes to the loop, which
// answers it (handle).
func (b *Broker) frontendPublish(frames [][]byte) bool {
	if code, _ := b.publishRefusal(frames[4], frames[5]); code != "" {
		return false
	}
	b.pub.Load().Publish(frames[4], frames[5])
	return true
}

// pubRefuse answers a publisher on PublisherIncoming, from its reader.
func (b *Broker) pubRefuse(id, ref, code, text string) {
	b.stats.countError(code)
	if r := b.pubIn.Load(); r != nil { // nil only before Listen has returned
		_ = r.Send(id, emqp.Encode(&emqp.Error{MsgID: emqp.NewID(), RefMsgID: ref, Code: code, Text: text}))
	}
}

// protocolCode is the ERROR code and ref msgid for a decoder's refusal.
func protocolCode(err error) (code, ref string) {
	code = emqp.CodeBadRequest
	var de *emqp.DecodeError
	if errors.As(err, &de) {
		ref = de.MsgID
		switch {
		case errors.Is(err, emqp.ErrVersion):
			code = emqp.CodeUnsupportedVersion
		case errors.Is(err, emqp.ErrCommand):
			code = emqp.CodeUnknownCommand
		}
	}
	return code, ref
}

// PubSubStats are pub/sub's counters (all zero when it is off).
type PubSubStats struct {
	On            bool   `json:"on"`
	Published     uint64 `json:"published"`
	Delivered     uint64 `json:"delivered"`
	Dropped       uint64 `json:"dropped"`
	Refused       uint64 `json:"refused"` // subscriber connections closed at once: max-subscribers
	Subscribers   int    `json:"subscribers"`
	Subscriptions int64  `json:"subscriptions"`
	QueuedBytes   int64  `json:"queued_bytes"`
	LastValues    int    `json:"last_values"` // topics in the last-value cache
}

// PubSub returns pub/sub's counters.
func (b *Broker) PubSub() PubSubStats {
	p := b.pub.Load()
	if p == nil {
		return PubSubStats{}
	}
	s := p.Stats()
	return PubSubStats{On: true, Published: s.Published, Delivered: s.Delivered, Dropped: s.Dropped, Refused: s.Refused,
		Subscribers: s.Subscribers, Subscriptions: s.Subscriptions, QueuedBytes: s.QueuedBytes, LastValues: s.LastValues}
}
