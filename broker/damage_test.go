package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// selfChecking is a payload that says whether it is whole: the CRC-32 of
// its body, then the body.
func selfChecking(rng *rand.Rand, i int) []byte {
	body := make([]byte, 20+rng.IntN(3000))
	for k := range body {
		body[k] = 'a' + byte(rng.IntN(26))
	}
	copy(body, fmt.Sprintf("job %d ", i))
	return fmt.Appendf(nil, "%08x %s", crc32.ChecksumIEEE(body), body)
}

func whole(p []byte) bool {
	var sum uint32
	if len(p) < 9 || p[8] != ' ' {
		return false
	}
	if _, err := fmt.Sscanf(string(p[:8]), "%08x", &sum); err != nil {
		return false
	}
	return crc32.ChecksumIEEE(p[9:]) == sum
}

// used is how much of a file holds anything: up to its last byte that is
// not zero (preallocated and free space past it is all zeros).
func used(t *testing.T, path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return int64(n)
}

// damage overwrites 1–64 random bytes at a random place of what path
// holds; it says where.
func damage(t *testing.T, rng *rand.Rand, path string) string {
	n := used(t, path)
	if n == 0 {
		n = 1
	}
	off := rng.Int64N(n)
	junk := make([]byte, 1+rng.IntN(64))
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d bytes at offset %d of %s", len(junk), off, filepath.Base(path))
}

// tryChild starts a broker child on dir and waits until it serves or
// exits; refused is what it said on the way out, with its exit status.
func tryChild(t *testing.T, what, dir, frontend, backend string, env ...string) (c *child, refused string, status int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = bt.ChildEnv(append([]string{childEnv + "=" + dir, "EMQ_TEST_FRONTEND=" + frontend, "EMQ_TEST_BACKEND=" + backend}, env...)...)
	var stderr testutil.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited; exited <- nil })
	deadline := time.After(bt.Wait)
	for {
		select {
		case err := <-exited:
			exited <- err
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				status = ee.ExitCode()
			}
			return nil, stderr.String(), status
		case <-deadline:
			t.Fatalf("%s: the broker neither served nor stopped within %v: a hang at open\n%s", what, bt.Wait, stderr.String())
		default:
		}
		if conn, err := zmtp.Dial(t.Context(), backend, zmtp.DialOptions{Timeout: 100 * time.Millisecond}); err == nil {
			conn.Close()
			return &child{cmd: cmd, frontend: frontend, backend: backend, exited: exited}, "", 0
		}
	}
}

// Damage, as a failing disk does it: 300 self-checking jobs stored, the
// broker stopped (gracefully or killed), 1–64 random bytes overwritten
// at a random place of bbolt's file or of a log segment. emq journal
// check's report is taken, then the broker started again. It must never
// panic or hang. Either it refuses, naming the file and emq journal
// check, where check found the damage; or it serves, and then a worker
// gets only whole payloads, and every job it does not get is in the dead
// letters as damaged, or in the quarantine, or was reported by check. 5
// trials; 50 with EMQ_TORTURE.
func TestDamageIsRefusedOrSetAside(t *testing.T) {
	t.Parallel()
	trials := 5
	if torture() {
		trials = 50
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("EMQ_TEST_SEED"), 10, 64); err == nil {
		seed = v // a failure's seed, to see it again
	}
	t.Logf("seed %d (EMQ_TEST_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	outcomes := map[string]int{}
	for trial := range trials {
		outcomes[damageTrial(t, trial, rng)]++
	}
	t.Logf("outcomes: %v", outcomes)
	suite.add("damage trials survived", trials)
}

func damageTrial(t *testing.T, trial int, rng *rand.Rand) string {
	dir := t.TempDir()
	journal := filepath.Join(dir, broker.JournalFile)
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	adminAddr := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	env := []string{"EMQ_TEST_SEGMENT=1048576", "EMQ_TEST_ADMIN=" + adminAddr}
	c := startChild(t, dir, frontend, backend, env...)
	client := dialRaw(t, frontend, "damage-client")
	const jobs = 300
	acked := map[string]bool{}
	for i := range jobs {
		if err := client.send(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: selfChecking(rng, i)}); err != nil {
			t.Fatal(err)
		}
	}
	for len(acked) < jobs {
		select {
		case m := <-client.in:
			if a, ok := m.(*emqp.Ack); ok {
				acked[a.AckedID] = true
			}
		case <-time.After(bt.Wait):
			t.Fatalf("trial %d: %d of %d ACKed", trial, len(acked), jobs)
		}
	}
	client.conn.Close()
	how := "killed"
	if trial%2 == 0 {
		how = "stopped"
		c.cmd.Process.Signal(syscall.SIGTERM)
		c.cmd.Wait()
	} else {
		c.kill()
	}

	// The place: bbolt's file or a segment of the log, as they hold bytes.
	targets := []string{journal}
	segs, _ := filepath.Glob(filepath.Join(boltstore.LogDir(journal), "*.wal"))
	for _, s := range segs {
		if used(t, s) > 64 { // more than a header: records
			targets = append(targets, s)
		}
	}
	target := journal
	if len(targets) > 1 && rng.IntN(2) == 1 {
		target = targets[1+rng.IntN(len(targets)-1)]
	}
	where := damage(t, rng, target)
	rep, err := boltstore.Check(journal)
	if err != nil {
		t.Fatalf("trial %d (%s, %s): emq journal check failed: %v", trial, how, where, err)
	}

	c, refused, status := tryChild(t, fmt.Sprintf("trial %d (%s, %s)", trial, how, where), dir, frontend, backend, env...)
	if c == nil {
		if status != 1 || strings.Contains(refused, "\ngoroutine ") { // a Go panic exits 2, with its stacks
			t.Fatalf("trial %d (%s, %s): the broker stopped with status %d:\n%s", trial, how, where, status, refused)
		}
		if !strings.Contains(refused, filepath.Base(target)) || !strings.Contains(refused, "emq journal check") {
			t.Fatalf("trial %d (%s, %s): refused without naming %s and emq journal check:\n%s", trial, how, where, filepath.Base(target), refused)
		}
		if rep.OK() {
			t.Fatalf("trial %d (%s, %s): the broker refused what emq journal check found sound: %s", trial, how, where, refused)
		}
		t.Logf("trial %d (%s, %s): refused; check: checkpoint %d, %d log records, %d values damaged, structure %q",
			trial, how, where, rep.Checkpoint, rep.Records, len(rep.Damaged), rep.Structure)
		// The operator's way on: --journal-recover keeps every good
		// record; what it could not keep, check named.
		label := fmt.Sprintf("trial %d (%s, %s), recovered", trial, how, where)
		c, refused, status = tryChild(t, label, dir, frontend, backend, append(env, "EMQ_TEST_RECOVER=1")...)
		if c == nil {
			if status != 1 || strings.Contains(refused, "\ngoroutine ") {
				t.Fatalf("%s: the broker stopped with status %d:\n%s", label, status, refused)
			}
			// The way left: emq journal salvage into a new folder.
			salvaged := t.TempDir()
			srep, err := boltstore.Salvage(journal, filepath.Join(salvaged, broker.JournalFile))
			if err != nil {
				t.Fatalf("%s: salvage: %v", label, err)
			}
			t.Logf("%s: still refused; salvaged %d jobs, lost %d items %q; the file's pages: %q", label, srep.Jobs, len(srep.Lost), srep.Lost, srep.Pages)
			label = fmt.Sprintf("trial %d (%s, %s), salvaged", trial, how, where)
			if c, refused, status = tryChild(t, label, salvaged, frontend, backend, env...); c == nil {
				t.Fatalf("%s: the salvaged journal does not serve (status %d):\n%s", label, status, refused)
			}
			drain(t, label, c, filepath.Join(salvaged, broker.JournalFile), adminAddr, acked, rep)
			return "refused, even with --journal-recover; salvaged"
		}
		drain(t, label, c, journal, adminAddr, acked, rep)
		return "refused, then served with --journal-recover"
	}
	if served, aside, lost := drain(t, fmt.Sprintf("trial %d (%s, %s)", trial, how, where), c, journal, adminAddr, acked, rep); aside+lost == 0 {
		return "unaffected"
	} else {
		t.Logf("trial %d (%s, %s): served %d, set aside %d, lost as check reported %d", trial, how, where, served, aside, lost)
	}
	return "served, damage set aside"
}

// drain has a worker take every job the broker c hands out, each of
// which must be whole, stops c, and accounts for every ACKed job: handed
// out, or in the dead letters as damaged, or in the quarantine, or lost
// where check reported damage.
func drain(t *testing.T, label string, c *child, journal, adminAddr string, acked map[string]bool, rep boltstore.CheckReport) (served, aside, lost int) {
	worker := bt.Worker(t, c.backend, "w", "q")
	worker.Ready(len(acked))
	got := map[string]bool{}
	var mu sync.Mutex
	go func() {
		for {
			m, ok := worker.TryRecv(bt.Wait)
			if !ok {
				return
			}
			r, ok := m.(*emqp.Request)
			if !ok {
				continue
			}
			if !whole(r.Payload) {
				t.Errorf("%s: job %s dispatched with a damaged payload %.40q", label, r.MsgID, r.Payload)
			}
			mu.Lock()
			got[r.MsgID] = true
			mu.Unlock()
			worker.Reply(r.MsgID, nil)
		}
	}()
	var qs []broker.QueueInfo
	defer func() {
		if t.Failed() {
			t.Logf("%s: queues at the end: %+v; served %d", label, qs, len(got))
		}
	}()
	bt.Eventually(t, "every job the broker holds handed out and replied", func() bool {
		if bt.APIAt(t, adminAddr, "GET", "/api/v1/queues", "", &qs) != 200 {
			return false
		}
		for _, q := range qs {
			if q.Pending+q.Delayed+q.InFlight > 0 {
				return false
			}
		}
		return true
	})
	c.cmd.Process.Signal(syscall.SIGTERM)
	testutil.RecvWithin(t, time.Minute, c.exited, label+": the broker's exit after SIGTERM")
	c.exited <- nil

	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	j, err := boltstore.Open(journal, opts)
	if err != nil {
		t.Fatalf("%s: the journal the broker served from does not open: %v", label, err)
	}
	defer j.Close()
	// A file too damaged to list says so (store.ErrCorrupt), where check
	// found it damaged: what it holds is then check's to name.
	unreadable := func(err error) bool {
		if errors.Is(err, store.ErrCorrupt) && !rep.OK() {
			return true
		}
		t.Fatalf("%s: %v", label, err)
		return false
	}
	dead := map[string]string{}
	for after := ""; ; {
		p, err := j.List(store.ListOptions{State: store.Dead, After: after, NoPayloads: true})
		if err != nil && unreadable(err) {
			break
		}
		for _, job := range p.Jobs {
			dead[job.MsgID] = job.LastError
		}
		if after = p.Next; after == "" {
			break
		}
	}
	quarantined, err := j.Damaged()
	if err != nil {
		unreadable(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var gone []string
	for id := range acked {
		switch {
		case got[id]:
			served++
		case strings.Contains(dead[id], "damaged"), named(quarantined, id):
			aside++
		default:
			gone = append(gone, id)
		}
	}
	if aside > 0 && rep.OK() {
		t.Fatalf("%s: %d jobs set aside as damaged, yet emq journal check found nothing: %+v", label, aside, rep)
	}
	// Bytes overwritten in the log's very last trailer look exactly like
	// a torn write: cut as one, and said so (by check, and in the log).
	if len(gone) > 0 && rep.OK() && rep.Torn == nil {
		t.Fatalf("%s: %d ACKed jobs gone without a trace (%v); check said %+v", label, len(gone), gone[:min(3, len(gone))], rep)
	}
	return served, aside, len(gone)
}

// named says whether a quarantine entry names msgid.
func named(entries []store.DamagedEntry, msgid string) bool {
	for _, e := range entries {
		if strings.Contains(e.Key, msgid) {
			return true
		}
	}
	return false
}

// A value that fails its checksum in bbolt's file is never dispatched:
// the broker stopped (its journal all in the file), one byte changed in
// the payload of a small job (checked when the journal opens) and of a
// large one (over 64 KiB: checked when its payload is read to be sent),
// the broker started again. A worker gets the whole jobs and nothing
// else; the damaged ones are dead letters saying so.
func TestDamagedValueIsNeverDispatched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := bt.Start(t, dir, fast)
	client := bt.Dial(t, b.Frontend(), "c")
	payloads := map[string][]byte{}
	send := func(p []byte) string {
		id := client.Request("q", "", p)
		payloads[id] = p
		return id
	}
	whole1 := send([]byte("whole before"))
	small := send([]byte("DAMAGED-SMALL a payload to be changed in the file"))
	large := send(append([]byte("DAMAGED-LARGE"), bytes.Repeat([]byte("128 KiB."), 16<<10)...))
	whole2 := send([]byte("whole after"))
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	// Every copy the file holds (a page bbolt freed may hold an older one).
	path := filepath.Join(dir, broker.JournalFile)
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, marker := range []string{"DAMAGED-SMALL", "DAMAGED-LARGE"} {
		n := 0
		for off := 0; ; n++ {
			i := bytes.Index(file[off:], []byte(marker))
			if i < 0 {
				break
			}
			file[off+i+len(marker)/2] ^= 0x20
			off += i + len(marker)
		}
		if n == 0 {
			t.Fatalf("%s is not in %s: the journal's close left it in the log, not the file", marker, path)
		}
	}
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}

	b = bt.Start(t, dir, fast)
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(4)
	got := map[string]bool{}
	bt.Eventually(t, "every job the broker holds handed out and replied", func() bool {
		for {
			m, ok := w.TryRecv(time.Millisecond)
			if !ok {
				break
			}
			r, ok := m.(*emqp.Request)
			if !ok {
				continue
			}
			if !bytes.Equal(r.Payload, payloads[r.MsgID]) || r.MsgID == small || r.MsgID == large {
				t.Fatalf("job %s dispatched with %.40q: a damaged value served", r.MsgID, r.Payload)
			}
			got[r.MsgID] = true
			w.Reply(r.MsgID, nil)
		}
		qs, err := b.Queues(t.Context())
		return err == nil && len(qs) == 1 && qs[0].Pending+qs[0].Delayed+qs[0].InFlight == 0
	})
	if !got[whole1] || !got[whole2] || len(got) != 2 {
		t.Fatalf("the worker got %v; want the 2 whole jobs %s and %s", got, whole1, whole2)
	}
	for _, id := range []string{small, large} { // moved aside by a write of the journal's own, once found
		bt.Eventually(t, "damaged job "+id+" a dead letter saying so", func() bool {
			j, _, err := b.Job(t.Context(), id)
			return err == nil && j.State == store.Dead && strings.Contains(j.LastError, "damaged in the journal")
		})
	}
}
