package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// journalKeyLines makes a journal key line for each name (emq keygen
// --journal NAME).
func journalKeyLines(t *testing.T, names ...string) map[string]string {
	t.Helper()
	lines := map[string]string{}
	for _, n := range names {
		lines[n] = mustEmq(t, "keygen", "--journal", n)
	}
	return lines
}

// writeKeys writes the key file with the lines of names, in order.
func writeKeys(t *testing.T, file string, lines map[string]string, names ...string) {
	t.Helper()
	var text strings.Builder
	for _, n := range names {
		text.WriteString(lines[n])
	}
	if err := os.WriteFile(file, []byte(text.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Keys rotated online, as docs/security.md tells it: a broker started
// with key old takes new first at SIGHUP (and refuses, keeping its keys
// and telling systemd, a file that does not read, naming it, or one
// without old while the journal still needs it, naming old); emq journal rekey
// --wait seals everything again under new, printing its progress, and
// names old as no longer needed; emq stats shows the rekey; at the next
// SIGHUP the file without old is taken, and the journal opens with new
// alone.
func TestJournalRekeyOnlineAndSIGHUP(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	keys := filepath.Join(tmp, "journal.keys")
	lines := journalKeyLines(t, "old", "new")
	writeKeys(t, keys, lines, "old")
	dir := t.TempDir()
	frontend := bt.FreeEndpoint(t)
	sock := listenNotify(t, filepath.Join(t.TempDir(), "notify"))
	bp := startNotifiedBroker(t, sock, "--frontend", frontend, "--backend", bt.FreeEndpoint(t), "--data-dir", dir,
		"--publisher-incoming", "", "--publisher-outgoing", "", "--journal-keys", keys)
	if ready := sock.next(t); ready[0] != "READY=1" {
		t.Fatalf("the first notification is %q, want READY=1\n%s", ready, bp.logs.String())
	}
	jobs := 300
	c := bt.Dial(t, frontend, "c")
	for i := range jobs {
		c.Request("q", "", fmt.Appendf(nil, "EMQ-ROTATED-PAYLOAD %d", i))
	}

	// hup sends SIGHUP and returns the broker's word on the keys: the
	// status it tells systemd once reloaded, and the count-th log line
	// that takes or refuses them.
	hup := func(count int) (status, line string) {
		t.Helper()
		bp.cmd.Process.Signal(syscall.SIGHUP)
		if r := sock.next(t); r[0] != "RELOADING=1" || !hasPrefix(r, "STATUS=SIGHUP: re-reading the CURVE clients and PLAIN users, and the journal keys") {
			t.Fatalf("after SIGHUP: %q, want RELOADING=1 naming the journal keys", r)
		}
		ready := sock.next(t)
		if ready[0] != "READY=1" {
			t.Fatalf("after RELOADING=1: %q, want READY=1", ready)
		}
		var seen []string
		bt.Eventually(t, "the log's word on the journal keys", func() bool { // its stderr comes by a pipe of its own
			seen = seen[:0]
			for l := range strings.SplitSeq(bp.logs.String(), "\n") {
				if strings.Contains(l, "journal keys re-read") || strings.Contains(l, "journal keys refused") {
					seen = append(seen, l)
				}
			}
			return len(seen) >= count
		})
		return lineValue(ready, "STATUS="), seen[count-1]
	}
	writeKeys(t, keys, lines, "new")
	if status, line := hup(1); !strings.Contains(line, "refused") || !strings.Contains(line, "key old") || !strings.Contains(line, keys) ||
		!strings.Contains(status, "the journal keys were refused, the old ones stay") || !strings.Contains(status, "key old") {
		t.Fatalf("SIGHUP with a key file without old, which the journal needs: status %q, log %s", status, line)
	}
	if err := os.WriteFile(keys, []byte("new not-base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if status, line := hup(2); !strings.Contains(line, "refused") || !strings.Contains(line, keys+": line 1") || !strings.Contains(status, keys+": line 1") {
		t.Fatalf("SIGHUP with a key file that does not read: status %q, log %s", status, line)
	}
	c.Request("q", "", []byte("EMQ-ROTATED-PAYLOAD under old")) // the old keys stayed
	jobs++
	writeKeys(t, keys, lines, "new", "old")
	if status, line := hup(3); !strings.Contains(line, "re-read") || !strings.Contains(line, "key=new") || !strings.HasPrefix(status, "serving") {
		t.Fatalf("SIGHUP with new first: status %q, log %s", status, line)
	}

	out, stderr, err := emq(t, "", "journal", "rekey", "--wait", "--rate", "100", "--admin", bp.admin)
	if err != nil {
		t.Fatalf("emq journal rekey --wait: %v\n%s\n%s", err, out, stderr)
	}
	progress := 0
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, "sealing again under key new: pass 1") && !strings.Contains(l, " 0 sealed again") {
			progress++
		}
	}
	if progress == 0 || !strings.Contains(out, fmt.Sprintf("every value is under key new: %d sealed again", jobs)) ||
		!strings.Contains(out, "the journal no longer needs key old") || !strings.Contains(out, "key old may go") {
		t.Fatalf("emq journal rekey --wait printed %d progress lines:\n%s", progress, out)
	}
	if out := mustEmq(t, "stats", "--admin", bp.admin); !strings.Contains(out, "every value is under key new") {
		t.Fatalf("emq stats after the rekey:\n%s", out)
	}
	out = mustEmq(t, "journal", "rekey", "--admin", bp.admin, "--json")
	var st store.RekeyStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Key != "new" {
		t.Fatalf("emq journal rekey --json: %v\n%s", err, out)
	}

	writeKeys(t, keys, lines, "new")
	if status, line := hup(4); !strings.Contains(line, "re-read") || !strings.Contains(line, "keys=new ") || !strings.HasPrefix(status, "serving") {
		t.Fatalf("SIGHUP without old after the rekey: status %q, log %s", status, line)
	}
	c.Request("q", "", []byte("EMQ-ROTATED-PAYLOAD after"))
	bp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-bp.exited:
		bp.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("emq broker exited with %v\n%s", err, bp.logs.String())
		}
	case <-time.After(bt.Wait):
		t.Fatalf("the broker did not stop\n%s", bp.logs.String())
	}
	if out := mustEmq(t, "journal", "check", "--data-dir", dir); !strings.Contains(out, "encrypted at rest: yes (keys new)") {
		t.Fatalf("emq journal check after the rekey:\n%s", out)
	}
	out = mustEmq(t, "jobs", "ls", "--data-dir", dir, "--journal-keys", keys, "--limit", "1000", "--json")
	if n := strings.Count(out, `"msgid"`); n != jobs+1 {
		t.Fatalf("emq jobs ls with key new alone: %d jobs, want %d", n, jobs+1)
	}
}

// Offline, emq journal rekey opens a stopped broker's journal with the
// key file, seals every value again under its first key as fast as it
// goes, and closes it: the journal then needs the first key alone. It
// refuses a journal a broker holds (saying so) and one without keys.
func TestJournalRekeyOffline(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	keys := filepath.Join(tmp, "journal.keys")
	lines := journalKeyLines(t, "old", "new")
	writeKeys(t, keys, lines, "old")
	dir := t.TempDir()
	path := filepath.Join(dir, broker.JournalFile)
	open := func(file string) *boltstore.Journal {
		t.Helper()
		k, err := store.ReadKeyring(file)
		if err != nil {
			t.Fatal(err)
		}
		opts := boltstore.DefaultOptions()
		opts.Keys = k
		j, err := boltstore.Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := open(keys)
	const jobs = 500
	for i := range jobs {
		if _, err := store.Wait(func(d func(bool, error)) {
			j.Append(&store.Job{MsgID: fmt.Sprintf("j%03d", i), Queue: "q", Payload: fmt.Appendf(nil, "payload %d", i)}, d)
		}); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(t, keys, lines, "new", "old")
	// A broker holds it: refused, saying so.
	if _, stderr, err := emq(t, "", "journal", "rekey", "--data-dir", dir, "--journal-keys", keys); err == nil || !strings.Contains(stderr, "in use by a running broker") {
		t.Fatalf("emq journal rekey on a journal held: %v\n%s", err, stderr)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	out := mustEmq(t, "journal", "rekey", "--data-dir", dir, "--journal-keys", keys)
	if !strings.Contains(out, fmt.Sprintf("every value is under key new: %d sealed again", jobs)) ||
		!strings.Contains(out, "the journal no longer needs key old") || !strings.Contains(out, "key old may go") {
		t.Fatalf("emq journal rekey offline:\n%s", out)
	}
	if out := mustEmq(t, "journal", "check", "--data-dir", dir); !strings.Contains(out, "encrypted at rest: yes (keys new)") {
		t.Fatalf("emq journal check after the rekey:\n%s", out)
	}
	// With the keys, the check opens every value and counts them by key.
	if out := mustEmq(t, "journal", "check", "--data-dir", dir, "--journal-keys", keys); !regexp.MustCompile(fmt.Sprintf(`values under key new +%d\n`, jobs)).MatchString(out) ||
		strings.Contains(out, "key old") || !strings.Contains(out, "ok: every byte checks") {
		t.Fatalf("emq journal check --journal-keys after the rekey:\n%s", out)
	}
	writeKeys(t, keys, lines, "new")
	j = open(keys) // fails without old unless the rekey dropped it
	job, err := j.Get("j042")
	if err != nil || string(job.Payload) != "payload 42" {
		t.Fatalf("a job after the rekey, read with new alone: %+v %v", job, err)
	}
	j.Close()
	out = mustEmq(t, "journal", "rekey", "--data-dir", dir, "--journal-keys", keys, "--json")
	var st store.RekeyStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Running || st.Finished.IsZero() || st.Resealed != 0 {
		t.Fatalf("a second rekey offline, --json: %v\n%s", err, out)
	}

	clear, _ := journalWithJobs(t)
	if _, stderr, err := emq(t, "", "journal", "rekey", "--data-dir", clear); err == nil || !strings.Contains(stderr, "no keys to seal under (--journal-keys FILE)") {
		t.Fatalf("emq journal rekey without keys: %v\n%s", err, stderr)
	}
}

// Keys rotated online in a group on etcd, across a failover: SIGHUP
// gives the leader and the standby new keys (the standby refuses, by
// name, a file without a key the journal still needs), the rekey starts
// on the leader, the leader is killed half way, and the standby that
// takes over goes on with it where it was; at its end old may go. Then,
// with the group stopped, emq journal rekey --etcd-endpoints rotates
// again offline.
func TestJournalRekeyGroupFailover(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	eps := strings.Join(etcd.Endpoints(), ",")
	tmp := t.TempDir()
	keys := filepath.Join(tmp, "journal.keys")
	lines := journalKeyLines(t, "old", "new", "k3")
	writeKeys(t, keys, lines, "old")
	member := func(name string) (*groupBroker, *notifySocket) {
		sock := listenNotify(t, filepath.Join(t.TempDir(), "notify"))
		g := makeGroupBroker(t, etcd.Endpoints(), name, "--journal-keys", keys)
		g.env = []string{"NOTIFY_SOCKET=" + sock.path}
		g.start()
		return g, sock
	}
	// hup sends g SIGHUP and returns the status it tells systemd once
	// it reloaded.
	hup := func(g *groupBroker, sock *notifySocket) string {
		t.Helper()
		g.cmd.Process.Signal(syscall.SIGHUP)
		for r := sock.next(t); r[0] != "RELOADING=1"; r = sock.next(t) {
		}
		ready := sock.next(t)
		if ready[0] != "READY=1" {
			t.Fatalf("%s after RELOADING=1: %q, want READY=1", g.name, ready)
		}
		return lineValue(ready, "STATUS=")
	}
	a, aSock := member("a")
	leaderOf(t, a)
	b, bSock := member("b")
	leaderOf(t, a, b)

	c, err := client.New(client.Options{Broker: a.frontend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	const jobs = 200
	for i := range jobs {
		ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
		_, err := c.Send(ctx, "q", fmt.Appendf(nil, "EMQ-GROUP-ROTATED %d", i))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	c.Close()

	writeKeys(t, keys, lines, "new")
	if status := hup(b, bSock); !strings.Contains(status, "the journal keys were refused") || !strings.Contains(status, "key old") {
		t.Fatalf("the standby's SIGHUP with a key file without old: %q", status)
	}
	writeKeys(t, keys, lines, "new", "old")
	for _, m := range []struct {
		g    *groupBroker
		sock *notifySocket
	}{{a, aSock}, {b, bSock}} {
		if status := hup(m.g, m.sock); strings.Contains(status, "refused") {
			t.Fatalf("%s's SIGHUP with new first: %q", m.g.name, status)
		}
	}

	// Paced so that it runs seconds: a is killed while it runs.
	if out := mustEmq(t, "journal", "rekey", "--rate", "50", "--admin", a.admin); !strings.Contains(out, "sealing again under key new") {
		t.Fatalf("emq journal rekey on the leader:\n%s", out)
	}
	if _, stderr, err := emq(t, "", "journal", "rekey", "--admin", b.admin); err == nil || !strings.Contains(stderr, "standby") || !strings.Contains(stderr, "a leads the group") {
		t.Fatalf("emq journal rekey on the standby: %v %s", err, stderr)
	}
	status := func(g *groupBroker) (st store.RekeyStatus) {
		resp, err := g.get("/api/v1/journal/rekey")
		if err != nil {
			return st
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			json.NewDecoder(resp.Body).Decode(&st)
		}
		return st
	}
	var before store.RekeyStatus
	bt.Eventually(t, "the leader's rekey under way", func() bool { before = status(a); return before.Running && before.Resealed > 0 })
	a.kill()
	leaderOf(t, b)
	var resumed store.RekeyStatus
	bt.Eventually(t, "the new leader going on with the rekey", func() bool { resumed = status(b); return resumed.Key == "new" })
	if !resumed.Started.Equal(before.Started) || resumed.Resealed < before.Resealed {
		t.Fatalf("the new leader's rekey, asked nothing: %+v; want it going on from where a was: %+v", resumed, before)
	}
	out, stderr, err := emq(t, "", "journal", "rekey", "--wait", "--rate", "100000", "--admin", b.admin)
	if err != nil || !strings.Contains(out, fmt.Sprintf("every value is under key new: %d sealed again", jobs)) ||
		!strings.Contains(out, "the journal no longer needs key old") {
		t.Fatalf("emq journal rekey --wait on the new leader: %v\n%s\n%s", err, out, stderr)
	}
	writeKeys(t, keys, lines, "new")
	if status := hup(b, bSock); strings.Contains(status, "refused") {
		t.Fatalf("SIGHUP without old after the rekey: %q", status)
	}
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}

	writeKeys(t, keys, lines, "k3", "new")
	out = mustEmq(t, "journal", "rekey", "--etcd-endpoints", eps, "--journal-keys", keys)
	if !strings.Contains(out, fmt.Sprintf("every value is under key k3: %d sealed again", jobs)) || !strings.Contains(out, "the journal no longer needs key new") {
		t.Fatalf("emq journal rekey offline on etcd:\n%s", out)
	}
	writeKeys(t, keys, lines, "k3")
	var qs []broker.QueueInfo
	out = mustEmq(t, "queues", "--etcd-endpoints", eps, "--journal-keys", keys, "--json")
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) != 1 || qs[0].Pending != jobs {
		t.Fatalf("queues with k3 alone: %v %s", err, out)
	}
}
