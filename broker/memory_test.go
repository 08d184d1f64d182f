package broker_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// The broker's memory tests run it as a child process and read its
// resident memory from /proc; each is larger with EMQ_TORTURE (make
// torture).

// residentMiB reads a /proc/PID/status line (VmRSS, VmHWM, RssAnon,
// RssFile) in MiB.
func residentMiB(t *testing.T, pid int, field string) float64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kb) / 1024
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func torture() bool { return os.Getenv("EMQ_TORTURE") != "" }

// memoryTest skips a memory test under the race detector, whose shadow
// memory is no measure of the broker's.
func memoryTest(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("resident memory under the race detector is not the broker's; make test runs this without it")
	}
	if testing.Short() {
		t.Skip("seconds of large writes: make memory and make test run it")
	}
	t.Parallel()
}

// A backlog whose payloads are far larger than the memory the broker uses:
// it starts, replays and delivers every job, byte for byte, its own memory
// (anonymous: heap, stacks, buffers) never more than a fraction of the
// payloads. The journal's pages mapped from the page cache are counted
// apart: clean, the kernel's to reclaim, and mapped a whole large folio
// (1 MiB and more on ext4) at each fault, so that reading a job maps its
// neighbours for a moment whatever the broker gives back; what is
// asserted of them is that they are given back (store/pages_linux.go), not
// kept for the backlog's size.
func TestBacklogLargerThanMemory(t *testing.T) {
	memoryTest(t)
	jobs, size := 512, 1<<20 // 512 MiB of payloads; 4 GiB with EMQ_TORTURE
	if torture() {
		jobs = 4096
	}
	dir := t.TempDir()
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), boltstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	payload := func(i int) []byte {
		p := make([]byte, size)
		binary.BigEndian.PutUint64(p, uint64(i))
		binary.BigEndian.PutUint64(p[size-8:], uint64(i))
		return p
	}
	var ids []string
	appendAll(t, j, jobs, func(i int) *store.Job {
		ids = append(ids, emqp.NewID())
		return &store.Job{MsgID: ids[i], Queue: "backlog", Payload: payload(i)}
	})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	c := startChild(t, dir, frontend, backend)
	pid := c.cmd.Process.Pid
	peak, mapped := residentMiB(t, pid, "RssAnon"), residentMiB(t, pid, "RssFile")
	w := bt.Worker(t, backend, "w", "backlog")
	w.Ready(16)
	for i := range jobs {
		r := bt.Expect[*emqp.Request](w)
		if r.MsgID != ids[i] || len(r.Payload) != size || binary.BigEndian.Uint64(r.Payload) != uint64(i) ||
			binary.BigEndian.Uint64(r.Payload[size-8:]) != uint64(i) {
			t.Fatalf("job %d: %s with %d bytes, want %s's %d", i, r.MsgID, len(r.Payload), ids[i], size)
		}
		w.Reply(r.MsgID, nil)
		w.Ready(1)
		if i%16 == 0 {
			peak = max(peak, residentMiB(t, pid, "RssAnon"))
			mapped = max(mapped, residentMiB(t, pid, "RssFile"))
		}
	}
	total := float64(jobs*size) / (1 << 20)
	t.Logf("%d jobs, %.0f MiB of payloads delivered; the broker's own memory at most %.0f MiB, file pages mapped at most %.0f MiB (%.0f MiB resident at the highest)",
		jobs, total, peak, mapped, residentMiB(t, pid, "VmHWM"))
	if peak > 256 {
		t.Errorf("the broker's own memory up to %.0f MiB, over 256 MiB for %.0f MiB of payloads", peak, total)
	}
	// Every job done, the journal's pages go back within a checkpoint or
	// two: the binary's own pages are what stays mapped.
	bt.Eventually(t, "the journal's pages given back", func() bool { return residentMiB(t, pid, "RssFile") < 64 })
}

// Jobs of 64 KiB sent faster than the checkpoint writes them into the
// file, and left waiting: the broker's own memory stays within 256 MiB
// while they arrive, after, and after a restart on them (SIGKILL: its
// log replays), since neither the journal's memory nor the payload cache
// grows with their bytes: 30,000 jobs, 1.9 GB. (With fewer the
// checkpoint keeps up well enough that a journal holding payloads in
// memory passes too: TestMemtableHoldsNoLargeValue in store/boltstore
// guards that.)
func TestLargePendingJobsStayWithinTheBudget(t *testing.T) {
	memoryTest(t)
	const jobs, window, budget = 30000, 64, 256
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	c := startChild(t, dir, frontend, backend)
	pid := c.cmd.Process.Pid
	p := bt.Dial(t, frontend, "large")
	payload := make([]byte, 64<<10)
	sent, acked, peak := 0, 0, 0.0
	for acked < jobs {
		for ; sent < jobs && sent-acked < window; sent++ {
			p.Send(&emqp.Request{MsgID: emqp.NewID(), Queue: "waiting", Payload: payload})
		}
		m, ok := p.TryRecv(bt.Wait)
		if _, isAck := m.(*emqp.Ack); !ok || !isAck {
			t.Fatalf("after %d ACKs: %T %+v, want an ACK", acked, m, m)
		}
		if acked++; acked%128 == 0 {
			peak = max(peak, residentMiB(t, pid, "RssAnon"))
		}
	}
	after := residentMiB(t, pid, "VmRSS")
	c.kill()
	c = startChild(t, dir, frontend, backend)
	restarted := residentMiB(t, c.cmd.Process.Pid, "VmRSS")
	t.Logf("%d jobs of 64 KiB: the broker's own memory at most %.0f MiB while they came, %.0f MiB resident after, %.0f MiB after a restart on them",
		jobs, peak, after, restarted)
	for _, m := range []struct {
		what string
		mib  float64
	}{{"while they came (anonymous)", peak}, {"after", after}, {"after a restart", restarted}} {
		if m.mib > budget {
			t.Errorf("%s: %.0f MiB, over %d MiB", m.what, m.mib, budget)
		}
	}
}

// Connections that announce large frames and then send next to nothing
// hold room in the receive budget, not memory, and do not keep other
// peers waiting.
func TestTricklersStayWithinTheBudget(t *testing.T) {
	memoryTest(t)
	const budget = 512 << 20
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	c := startChild(t, t.TempDir(), frontend, backend, fmt.Sprint("EMQ_TEST_MAX_RECEIVE=", budget))
	for i := range 100 {
		nc := rawDial(t, frontend)
		nc.Write(zmtpHello(fmt.Sprint("trickler-", i)))
		head := emqp.Encode(&emqp.Request{MsgID: emqp.NewID(), Queue: "big"})
		msg := zmtpMsg(head[:6])
		msg[len(msg)-2-len(head[5])] |= 1 // more: the payload follows
		msg = binary.BigEndian.AppendUint64(append(msg, 0x02), 256<<20)
		nc.Write(append(msg, make([]byte, 1024)...))
	}
	// Everyone else is served: small jobs, and one of 32 KiB.
	roundTrips(t, frontend, backend, "normal", 50)
	client := bt.Dial(t, frontend, "medium")
	client.Request("medium", "", make([]byte, 32<<10))

	rss := residentMiB(t, c.cmd.Process.Pid, "VmRSS")
	t.Logf("100 connections announcing 256 MiB each: the broker holds %.0f MiB", rss)
	if rss > budget>>20 {
		t.Errorf("resident memory %.0f MiB, over the receive budget of %d MiB", rss, budget>>20)
	}
}

// Many large jobs sent at once: every one is stored and ACKed, a few at a
// time as the receive budget allows, and memory stays a multiple of the
// budget, however many are sent: a job being journaled is in its frame,
// its record and bbolt's page buffers (which also copy the large record
// next to it again), and the garbage collector lets the heap grow to
// twice what is live. Measured: about 8 to 10 times the budget.
func TestLargeJobsAtOnce(t *testing.T) {
	memoryTest(t)
	clients, size := 16, 32<<20 // 100 MiB jobs with EMQ_TORTURE
	if torture() {
		size = 100 << 20
	}
	budget := 3 * size // two large frames at a time (seven eighths)
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	c := startChild(t, t.TempDir(), frontend, backend, fmt.Sprint("EMQ_TEST_MAX_RECEIVE=", budget))
	var peers []*bt.Peer
	var ids []string
	for i := range clients {
		p := bt.Dial(t, frontend, fmt.Sprint("large-", i))
		id := emqp.NewID()
		p.Send(&emqp.Request{MsgID: id, Queue: "large", Payload: make([]byte, size)})
		peers, ids = append(peers, p), append(ids, id)
	}
	for i, p := range peers {
		m, ok := p.TryRecv(2 * time.Minute)
		if ack, isAck := m.(*emqp.Ack); !ok || !isAck || ack.AckedID != ids[i] {
			t.Fatalf("client %d: %T %+v, want the ACK of %s", i, m, m, ids[i])
		}
	}
	peak := residentMiB(t, c.cmd.Process.Pid, "VmHWM")
	t.Logf("%d jobs of %d MiB at once, receive budget %d MiB: peak resident memory %.0f MiB",
		clients, size>>20, budget>>20, peak)
	if limit := float64(12*budget)/(1<<20) + 128; peak > limit {
		t.Errorf("peak resident memory %.0f MiB, over %.0f MiB", peak, limit)
	}
}
