package group

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd's client spreads requests over every endpoint it was given (gRPC
// round robin). A member that stops answering without closing its
// connections (partitioned, paused, its host frozen) keeps receiving its
// share, and holds each until its timeout: a commit wave then waits for
// it, so one silent member of three stalls the whole group until TCP
// gives the connection up (measured: the partition's length, up to some
// 6 s). gRPC's keepalive, the client's own detector, cannot ping more
// often than every 10 s.
//
// So the group asks each member itself, every probeEvery, for a
// linearizable read that needs a leader (what etcd's own endpoint health
// check asks), and gives the client only the members that answered
// within probeTimeout; all of them when none does (etcd is away: the
// requests' own errors say so). A member that answers again is given
// back at once. Requests already sent to a member that went silent still
// wait for their timeout (Options.Timeout); what follows goes elsewhere.
const (
	probeEvery   = 250 * time.Millisecond
	probeTimeout = 500 * time.Millisecond
)

// members keeps cli's endpoints to the members of g that answer, until
// ctx ends.
type members struct {
	cli  *clientv3.Client
	all  []string
	log  *slog.Logger
	mu   sync.Mutex
	bad  map[string]bool // the endpoints that did not answer their last probe
	used []string        // what cli was last given
}

func watchMembers(ctx context.Context, cli *clientv3.Client, g Options, log *slog.Logger) {
	if len(g.Endpoints) < 2 {
		return // nothing to choose from
	}
	m := &members{cli: cli, all: g.Endpoints, log: log, bad: map[string]bool{}, used: g.Endpoints}
	var wg sync.WaitGroup
	for _, ep := range g.Endpoints {
		one := g
		one.Endpoints = []string{ep}
		wg.Go(func() {
			// A client authenticates as it is made (with etcd-user): to a
			// member away now, that fails; it is tried again.
			var pc *clientv3.Client
			for pc == nil {
				var err error
				if pc, err = NewClient(one); err != nil {
					m.answered(ep, err)
					select {
					case <-ctx.Done():
						return
					case <-time.After(probeEvery):
					}
				}
			}
			defer pc.Close()
			m.probe(ctx, pc, ep, g.Prefix+"health")
		})
	}
	wg.Wait()
}

// probe asks ep every probeEvery until ctx ends, and reports each answer.
func (m *members) probe(ctx context.Context, pc *clientv3.Client, ep, key string) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), probeTimeout)
		_, err := pc.Get(pctx, key, clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.answered(ep, err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// answered notes ep's probe and, when what answers changed, gives cli
// the members that do.
func (m *members) answered(ep string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bad[ep] == (err != nil) {
		return
	}
	if err != nil {
		m.bad[ep] = true
		m.log.Warn("etcd: a member does not answer; requests go to the others", "endpoint", ep, "err", err)
	} else {
		delete(m.bad, ep)
		m.log.Info("etcd: a member answers again", "endpoint", ep)
	}
	use := slices.DeleteFunc(slices.Clone(m.all), func(e string) bool { return m.bad[e] })
	if len(use) == 0 {
		use = m.all
	}
	if !slices.Equal(use, m.used) {
		m.cli.SetEndpoints(use...)
		m.used = use
	}
}
