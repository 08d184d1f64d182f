package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// victimPayload is the payload of job "victim", the bytes a test's disk
// changes.
const victimPayload = "the payload the disk changed"

// journalWithJobs makes a data directory whose journal, stopped, holds
// ten jobs and "victim", all in bbolt's file; it returns the directory
// and every job's payload.
func journalWithJobs(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	jobs := map[string]string{"victim": victimPayload}
	for i := range 10 {
		jobs[fmt.Sprintf("job-%d", i)] = fmt.Sprintf("payload of job %d", i)
	}
	opts := boltstore.DefaultOptions()
	opts.Logger = bt.Logger(t)
	j, err := boltstore.Open(filepath.Join(dir, broker.JournalFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	for id, payload := range jobs {
		if _, err := store.Wait(func(d func(bool, error)) { j.Append(&store.Job{MsgID: id, Queue: "q", Payload: []byte(payload)}, d) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, jobs
}

// flipOnDisk changes a bit of every copy of marker in file, as a failing
// disk does.
func flipOnDisk(t *testing.T, file string, marker string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(marker)) {
		t.Fatalf("%s does not hold %q", file, marker)
	}
	for i := 0; ; {
		k := bytes.Index(b[i:], []byte(marker))
		if k < 0 {
			break
		}
		b[i+k+len(marker)/2] ^= 0x04
		i += k + len(marker)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// emq journal check says ok of a sound journal and exits 0; of one whose
// job's bytes changed it exits 1, naming the job, in text and in JSON.
func TestJournalCheckCLI(t *testing.T) {
	t.Parallel()
	dir, _ := journalWithJobs(t)
	if out := mustEmq(t, "journal", "check", "--data-dir", dir); !strings.Contains(out, "ok: every byte checks") {
		t.Fatalf("check of a sound journal:\n%s", out)
	}

	flipOnDisk(t, filepath.Join(dir, broker.JournalFile), victimPayload)
	out, stderr, err := emq(t, "", "journal", "check", "--data-dir", dir)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, `damaged value`) || !strings.Contains(out, `jobs/"victim"`) ||
		!strings.Contains(stderr, "problems") {
		t.Fatalf("check of a damaged journal: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	out, _, err = emq(t, "", "journal", "check", "--data-dir", dir, "--json")
	var rep boltstore.CheckReport
	if jerr := json.Unmarshal([]byte(out), &rep); !errors.As(err, &exit) || jerr != nil || len(rep.Damaged) != 1 || string(rep.Damaged[0].Key) != "victim" {
		t.Fatalf("check --json of a damaged journal: %v, %v, %+v\n%s", err, jerr, rep, out)
	}
}

// emq journal salvage writes every good job of a damaged journal into a
// new folder and names the one it lost; the new journal passes emq
// journal check and holds the others; a salvage into it again is refused,
// and leaves it as it was.
func TestJournalSalvageCLI(t *testing.T) {
	t.Parallel()
	dir, jobs := journalWithJobs(t)
	flipOnDisk(t, filepath.Join(dir, broker.JournalFile), victimPayload)
	to := filepath.Join(t.TempDir(), "salvaged")
	out := mustEmq(t, "journal", "salvage", "--data-dir", dir, "--to", to)
	if !strings.Contains(out, "salvaged") || !strings.Contains(out, `jobs/"victim"`) || strings.Contains(out, "nothing was lost") {
		t.Fatalf("salvage of a damaged journal:\n%s", out)
	}
	if out := mustEmq(t, "journal", "check", "--data-dir", to); !strings.Contains(out, "ok: every byte checks") {
		t.Fatalf("check of the salvaged journal:\n%s", out)
	}
	before, err := os.ReadFile(filepath.Join(to, broker.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := emq(t, "", "journal", "salvage", "--data-dir", dir, "--to", to); err == nil || !strings.Contains(stderr, "exists") {
		t.Fatalf("salvage into a journal: %v %s; want it refused", err, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(to, broker.JournalFile)); !bytes.Equal(after, before) {
		t.Fatal("a refused salvage changed the journal it was pointed at")
	}

	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	j, err := boltstore.Open(filepath.Join(to, broker.JournalFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	delete(jobs, "victim")
	var loaded []string
	if err := j.Load(func(jb *store.Job) error { loaded = append(loaded, jb.MsgID); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(loaded) != len(jobs) {
		t.Fatalf("the salvaged journal holds %v; want the %d good jobs", loaded, len(jobs))
	}
	err = j.Payloads(loaded, func(i int, p []byte, err error) {
		if err != nil || string(p) != jobs[loaded[i]] {
			t.Errorf("salvaged job %s: %q, %v; want %q", loaded[i], p, err, jobs[loaded[i]])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
