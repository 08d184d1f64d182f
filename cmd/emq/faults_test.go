package main

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/etcdtest"
)

// The faults a group's broker process meets, each for EMQ_FAULT_ROUNDS
// rounds (2; make faults: 20) while jobs flow: the leader paused
// (SIGSTOP, a VM freeze or a long stall) for 2, 5 and 30 times its
// lease's TTL then resumed, killed (SIGKILL) and stopped (SIGTERM: drain
// and resign). Checked: every ACKed job runs; at no sample (every 50 ms)
// do both brokers answer /readyz 200. Measured: the longest gap between
// two ACKs in a round. A leader that was paused finds on SIGCONT that it
// no longer leads, and stands by. The faults of the network (partitions
// of brokers and of etcd members) need network namespaces: not here yet.
func TestGroupFaults(t *testing.T) {
	rounds := 2
	if v, err := strconv.Atoi(os.Getenv("EMQ_FAULT_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	const ttl = 2 * time.Second // the default --leader-ttl
	pause := func(d time.Duration) func(t *testing.T, leader *groupBroker) {
		return func(t *testing.T, leader *groupBroker) {
			leader.signal(syscall.SIGSTOP)
			<-time.After(d) // the fault's length, not a wait for something
			leader.signal(syscall.SIGCONT)
		}
	}
	classes := []struct {
		name  string
		fault func(t *testing.T, leader *groupBroker)
	}{
		{"leader paused 2×TTL (4 s)", pause(2 * ttl)},
		{"leader paused 5×TTL (10 s)", pause(5 * ttl)},
		{"leader paused 30×TTL (60 s)", pause(30 * ttl)},
		{"leader SIGKILL, started again", func(t *testing.T, leader *groupBroker) { leader.kill(); leader.start() }},
		{"leader SIGTERM, started again", func(t *testing.T, leader *groupBroker) {
			if err := leader.stop(); err != nil {
				t.Errorf("the leader's exit after SIGTERM: %v", err)
			}
			leader.start()
		}},
	}
	if only := os.Getenv("EMQ_FAULT_CLASS"); only != "" {
		classes = slices.DeleteFunc(classes, func(c struct {
			name  string
			fault func(t *testing.T, leader *groupBroker)
		}) bool {
			return !strings.Contains(c.name, only)
		})
	}
	etcd := etcdtest.Start(t, 3)
	var rows [][]string
	for _, class := range classes {
		t.Run(class.name, func(t *testing.T) {
			a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
			leaderOf(t, a, b)
			both := sampleReady(a, b)
			l := startLoad(t, 4, a, b)
			var worst time.Duration
			for round := range rounds {
				l.waitAcks(t, 50, fmt.Sprintf("round %d: jobs ACKed", round))
				leader := leaderOf(t, a, b)
				began := time.Now()
				class.fault(t, leader)
				leaderOf(t, a, b) // one leads, the other (the one faulted too) stands by
				l.waitAcks(t, 50, fmt.Sprintf("round %d: jobs ACKed after the fault", round))
				worst = max(worst, l.longestGap(began, time.Now()))
			}
			l.stop()
			acked, again := l.check(t)
			twoReady := both()
			if twoReady > 0 {
				t.Errorf("%d samples with both brokers ready", twoReady)
			}
			rows = append(rows, []string{class.name, strconv.Itoa(rounds), strconv.Itoa(acked), strconv.Itoa(acked), "0",
				strconv.Itoa(again), worst.Round(10 * time.Millisecond).String(), strconv.Itoa(twoReady)})
			if t.Failed() {
				t.Logf("broker a:\n%s\nbroker b:\n%s", a.log(), b.log())
			}
		})
	}
	var sb strings.Builder
	sb.WriteString("\n| fault | rounds | ACKed | ran | lost | duplicates | longest gap between ACKs | two-ready samples |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		sb.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	t.Log(sb.String())
}

// signal sends sig to the broker's process.
func (g *groupBroker) signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd != nil {
		g.cmd.Process.Signal(sig)
	}
}

// sampleReady asks every broker's /readyz every 50 ms until the returned
// func is called, which says at how many samples more than one said 200.
// A broker that does not answer within 200 ms (paused) is not ready.
func sampleReady(bs ...*groupBroker) (stop func() int) {
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var two int
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ready := make([]bool, len(bs))
			var sampling sync.WaitGroup
			for i, b := range bs {
				sampling.Add(1)
				go func() {
					defer sampling.Done()
					resp, err := hc.Get("http://" + b.admin + "/readyz")
					if err == nil {
						resp.Body.Close()
						ready[i] = resp.StatusCode == http.StatusOK
					}
				}()
			}
			sampling.Wait()
			n := 0
			for _, r := range ready {
				if r {
					n++
				}
			}
			if n > 1 {
				two++
			}
		}
	}()
	return func() int { close(done); wg.Wait(); return two }
}

// longestGap is the longest time without an ACK between from and to.
func (l *load) longestGap(from, to time.Time) time.Duration {
	l.mu.Lock()
	at := slices.Clone(l.ackedAt)
	l.mu.Unlock()
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	last, worst := from, time.Duration(0)
	for _, a := range at {
		if a.Before(from) || a.After(to) {
			continue
		}
		worst = max(worst, a.Sub(last))
		last = a
	}
	return worst
}
