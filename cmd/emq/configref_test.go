package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/config.md is what emq config reference prints: a flag added,
// renamed or given another default without the docs fails here.
func TestConfigReferenceIsDocsConfig(t *testing.T) {
	var b bytes.Buffer
	if err := writeReference(&b, newRoot()); err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "config.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), docs) {
		got, want := strings.Split(b.String(), "\n"), strings.Split(string(docs), "\n")
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Fatalf("docs/config.md differs from the commands at line %d:\ncommands: %s\ndocs:     %s\n"+
					"(go run ./cmd/emq config reference > docs/config.md)", i+1, g, w)
			}
		}
	}
	for _, want := range []string{"## emq broker\n", "| `--frontend` | `EMQ_FRONTEND` | `frontend` | `tcp://127.0.0.1:47290` |",
		"| `--force` | – | – | `false` |", "## emq config check\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
}

// emq config check accepts a file the broker would start with, and names
// the key of each kind of mistake.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	check := func(name, text string) (string, error) {
		t.Helper()
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, err := emq(t, "", "config", "check", file)
		return out + stderr, err
	}
	if out, err := check("good.yaml", "frontend: tcp://127.0.0.1:5555\nretain-done: 1h\nqueues:\n  email: {concurrency: 4, rate: 10}\n"); err != nil || !strings.Contains(out, "good.yaml: ok") {
		t.Fatalf("a good file: %v\n%s", err, out)
	}
	if out, err := check("good.toml", "drain-timeout = \"30s\"\nmax-pending = 1000\n"); err != nil {
		t.Fatalf("a good TOML file: %v\n%s", err, out)
	}
	for _, c := range []struct{ name, text, want string }{
		{"unknown.yaml", "frontnd: tcp://127.0.0.1:5555\n", `unknown key "frontnd"`},
		{"duration.yaml", "heartbeat-interval: soon\n", "heartbeat-interval"},
		{"size.yaml", "payload-cache: lots\n", "payload-cache"},
		{"level.yaml", "log-level: loud\n", "log-level"},
		{"both.yaml", "retain-done: 1h\nresult-ttl: 2h\n", "retain-done"},
		{"queue.yaml", "queues:\n  email: {concurrency: -1}\n", "email"},
		{"anon.yaml", "frontend: tcp://0.0.0.0:5555\n", "allow-anonymous"},
		{"format.ini", "frontend=x\n", "unknown format"},
		// A group's settings are checked as the broker checks them at start.
		{"pipeline.yaml", "etcd-endpoints: http://127.0.0.1:1\netcd-pipeline: 0\n", "etcd-pipeline"},
		{"ttl.yaml", "etcd-endpoints: http://127.0.0.1:1\nleader-ttl: 1500ms\n", "leader-ttl"},
		{"gather.yaml", "etcd-endpoints: http://127.0.0.1:1\netcd-gather: 2s\n", "etcd-gather"},
		{"hold.yaml", "etcd-endpoints: http://127.0.0.1:1\netcd-hold-completes: -1s\n", "etcd-hold-completes"},
		{"holdword.yaml", "etcd-endpoints: http://127.0.0.1:1\netcd-hold-completes: yes\n", "etcd-hold-completes"},
		{"etcdsize.yaml", "etcd-endpoints: http://127.0.0.1:1\nmax-job-size: 100MiB\n", "max-job-size"},
	} {
		out, err := check(c.name, c.text)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %v\n%s; want an error naming %q", c.name, err, out, c.want)
		}
	}
}

// An admin command's --help lists its own flags first and the flags of
// where it reads (--admin, --data-dir, --etcd-*) after, under a heading.
func TestHelpGroupsWhereFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"stats"}, {"tail"}, {"jobs", "ls"}} {
		out := mustEmq(t, append(args, "--help")...)
		own, where, heading := strings.Index(out, "\nFlags:\n"), strings.Index(out, "--etcd-endpoints"), strings.Index(out, "\nWhich broker, or which journal directly:\n")
		if own < 0 || heading < own || where < heading || strings.Contains(out[own:heading], "--etcd-") || strings.Contains(out[own:heading], "--admin ") {
			t.Errorf("emq %s --help: own flags, then the etcd and admin ones under their heading, want; got\n%s", strings.Join(args, " "), out)
		}
	}
}
