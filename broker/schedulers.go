package broker

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/eventmq/emq/emqp"
)

// A scheduler is a peer that INFORMed with peer type "scheduler": EventMQ's
// emq-scheduler, which keeps schedules itself and sends a REQUEST when one
// is due. As EventMQ's router does, the broker forwards each SCHEDULE to
// one scheduler (in turn) and each UNSCHEDULE to all of them, sends them
// HEARTBEATs, and never gives them jobs. The broker stores no schedule
// itself: with no scheduler connected, SCHEDULE and UNSCHEDULE get ERROR
// unavailable rather than being dropped unseen.
type scheduler struct {
	key      peerKey
	lastSeen time.Time
}

func (b *Broker) findScheduler(key peerKey) int {
	return slices.IndexFunc(b.schedulers, func(s *scheduler) bool { return s.key == key })
}

// addScheduler registers a scheduler, or renews a known one. A worker
// that becomes a scheduler is lost as a worker first.
func (b *Broker) addScheduler(from peerKey, m *emqp.Inform) {
	if w := b.workers[from]; w != nil {
		b.lose(w, "the peer INFORMed again as a scheduler")
	}
	now := time.Now()
	if i := b.findScheduler(from); i >= 0 {
		b.schedulers[i].lastSeen = now
	} else {
		b.schedulers = append(b.schedulers, &scheduler{key: from, lastSeen: now})
		b.log.Info("scheduler joined", "peer", peerName(from))
	}
	b.ack(from, m.MsgID)
	b.beatKey(from, now)
}

func (b *Broker) removeScheduler(i int, reason string) {
	b.log.Info("scheduler lost", "peer", peerName(b.schedulers[i].key), "reason", reason)
	b.schedulers = slices.Delete(b.schedulers, i, i+1)
}

// schedule forwards a SCHEDULE, unchanged, to the next scheduler in turn
// that is connected now: one that lost its connection may come back
// within the heartbeat timeout, but what is sent to it meanwhile is lost.
func (b *Broker) schedule(from peerKey, m *emqp.Schedule) {
	for range b.schedulers {
		s := b.schedulers[0]
		b.schedulers = append(b.schedulers[1:], s)
		if b.connected(s.key) {
			b.send(s.key, m)
			b.stats.SchedulesForwarded.Add(1)
			return
		}
	}
	b.refuse(from, m.MsgID, emqp.CodeUnavailable, noScheduler)
}

// unschedule forwards an UNSCHEDULE to every connected scheduler: any of
// them may hold the schedule.
func (b *Broker) unschedule(from peerKey, m *emqp.Unschedule) {
	sent := false
	for _, s := range b.schedulers {
		if b.connected(s.key) {
			b.send(s.key, m)
			sent = true
		}
	}
	if !sent {
		b.refuse(from, m.MsgID, emqp.CodeUnavailable, noScheduler)
		return
	}
	b.stats.SchedulesForwarded.Add(1)
}

func (b *Broker) connected(key peerKey) bool { return b.routers[key.ep].Connected(key.id) }

const noScheduler = "no scheduler is connected: this broker passes SCHEDULE and UNSCHEDULE to an EventMQ scheduler (INFORM with peer type scheduler) and stores no schedules itself"

// expireSchedulers forgets schedulers silent past the heartbeat timeout.
func (b *Broker) expireSchedulers(now time.Time) {
	for i := len(b.schedulers) - 1; i >= 0; i-- {
		if now.Sub(b.schedulers[i].lastSeen) > b.opts.HeartbeatTimeout {
			b.removeScheduler(i, fmt.Sprintf("no message for %v (heartbeat timeout)", b.opts.HeartbeatTimeout))
		}
	}
}

func (b *Broker) beatKey(key peerKey, now time.Time) {
	b.send(key, &emqp.Heartbeat{MsgID: emqp.NewID(), Time: strconv.FormatInt(now.Unix(), 10)})
}
