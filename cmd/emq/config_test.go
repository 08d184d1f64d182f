package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// brokerConfig parses args for `emq broker` and returns its options.
func brokerConfig(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newBrokerCmd()
	cmd.InitDefaultHelpFlag() // as Execute does
	if err := cmd.Flags().Parse(args); err != nil {
		return "", err
	}
	file, _ := cmd.Flags().GetString("config")
	c, err := loadConfig(cmd.Flags(), file)
	if err != nil {
		return "", err
	}
	o, err := brokerOptions(c)
	if err != nil {
		return "", err
	}
	if _, err := adminOptions(c, o); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %v %v %d %d forward=%v", o.Frontend, o.DataDir, o.HeartbeatTimeout,
		o.ResultTTL, o.MaxFrameSize, o.MaxPending, o.ForwardSchedules), nil
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "emq.yaml")
	os.WriteFile(yaml, []byte("frontend: tcp://127.0.0.1:5000\ndata-dir: /from/file\nheartbeat-timeout: 9s\nmax-pending: 7\n"), 0o644)
	toml := filepath.Join(dir, "emq.toml")
	os.WriteFile(toml, []byte("data-dir = \"/from/toml\"\nresult-ttl = \"1h\"\n"), 0o644)

	got, err := brokerConfig(t, "--config", yaml)
	if err != nil {
		t.Fatal(err)
	}
	if want := "tcp://127.0.0.1:5000 /from/file 9s 0s 268435456 7 forward=false"; got != want {
		t.Errorf("file: %q, want %q", got, want)
	}
	t.Setenv("EMQ_DATA_DIR", "/from/env")
	t.Setenv("EMQ_MAX_FRAME_SIZE", "1MiB")
	t.Setenv("EMQ_FORWARD_SCHEDULES", "true")
	got, _ = brokerConfig(t, "--config", yaml)
	if want := "tcp://127.0.0.1:5000 /from/env 9s 0s 1048576 7 forward=true"; got != want {
		t.Errorf("env over file: %q, want %q", got, want)
	}
	got, _ = brokerConfig(t, "--config", yaml, "--data-dir", "/from/flag")
	if !strings.Contains(got, "/from/flag") {
		t.Errorf("flag over env: %q", got)
	}
	t.Setenv("EMQ_DATA_DIR", "")
	os.Unsetenv("EMQ_DATA_DIR")
	got, _ = brokerConfig(t, "--config", toml)
	if !strings.Contains(got, "/from/toml") || !strings.Contains(got, " 1h0m0s ") {
		t.Errorf("toml: %q", got)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("max-pendings: 3\n"), 0o644)
	file := func(name, text string) string {
		f := filepath.Join(dir, name)
		os.WriteFile(f, []byte(text), 0o644)
		return f
	}
	cases := []struct {
		args []string
		env  [2]string
		want string
	}{
		{args: []string{"--config", bad}, want: `unknown key "max-pendings": did you mean max-pending?`},
		{args: []string{"--config", file("far.yaml", "colour: blue\n")}, want: `unknown key "colour" (known: `},
		{args: []string{"--config", file("list.yaml", "max-pending: [1, 2]\n")}, want: "max-pending: a list, where a whole number is wanted"},
		{args: []string{"--config", file("map.yaml", "heartbeat-interval: {a: 1}\n")}, want: "heartbeat-interval: a map of keys, where a duration is wanted"},
		{args: []string{"--config", filepath.Join(dir, "none.yaml")}, want: "none.yaml"},
		{env: [2]string{"EMQ_HEARTBEAT_INTERVAL", "often"}, want: "heartbeat-interval"},
		{env: [2]string{"EMQ_MAX_FRAME_SIZE", "big"}, want: "max-frame-size"},
		{env: [2]string{"EMQ_MAX_PENDING", "-1"}, want: "max-pending"},
		{env: [2]string{"EMQ_FORWARD_SCHEDULES", "sometimes"}, want: `forward-schedules: "sometimes" is not true or false`},
		{args: []string{"--frontend", "127.0.0.1:1"}, want: "frontend"},
		{args: []string{"--heartbeat-timeout", "1ms"}, want: "heartbeat-timeout"},
		{env: [2]string{"EMQ_OVERDUE_AFTER", "soon"}, want: `overdue-after: "soon" is not a duration`},
		{args: []string{"--overdue-after", "-1s"}, want: "overdue-after: must be 0 (never) or positive"},
		{args: []string{"--publisher-incoming", "127.0.0.1:1"}, want: "publisher-incoming"},
		{args: []string{"--publisher-outgoing", ""}, want: "publisher-outgoing is empty"},
		{env: [2]string{"EMQ_SUBSCRIBER_HWM", "0"}, want: "subscriber-hwm"},
		{env: [2]string{"EMQ_EVENT_BUFFER", "0"}, want: "event-buffer"},
		{args: []string{"--retain-done", "1h", "--result-ttl", "2h"}, want: "retain-done 1h0m0s and result-ttl 2h0m0s: they are one setting"},
		{args: []string{"--retain-done", "-1h"}, want: "retain-done (result-ttl): must not be negative"},
		{env: [2]string{"EMQ_MAX_EVENT_LISTENERS", "many"}, want: "max-event-listeners"},
		{env: [2]string{"EMQ_PUBLISHER_BUFFER", "lots"}, want: "publisher-buffer"},
		{args: []string{"--publisher-outgoing", "tcp://127.0.0.1:47290"}, want: "frontend and publisher-outgoing are the same endpoint"},
	}
	for _, c := range cases {
		if c.env[0] != "" {
			t.Setenv(c.env[0], c.env[1])
		}
		_, err := brokerConfig(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want one naming %q", c.args, c.env, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "known: ") && strings.Contains(err.Error(), "help") {
			t.Errorf("%v: the known keys list help, no key of a file: %v", c.args, err)
		}
		if c.env[0] != "" {
			os.Unsetenv(c.env[0])
		}
	}
}

// The admin allow-lists read as a comma list from a flag or the
// environment, and as a list from a config file.
func TestConfigLists(t *testing.T) {
	yaml := filepath.Join(t.TempDir(), "emq.yaml")
	os.WriteFile(yaml, []byte("admin-allowed-hosts: [emq.internal, emq.example]\n"), 0o644)
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--admin-allowed-hosts", "a.example, b.example"}, want: "[a.example b.example]"},
		{env: "c.example,d.example", want: "[c.example d.example]"},
		{args: []string{"--config", yaml}, want: "[emq.internal emq.example]"},
	} {
		t.Setenv("EMQ_ADMIN_ALLOWED_HOSTS", c.env)
		cmd := newBrokerCmd()
		if err := cmd.Flags().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		file, _ := cmd.Flags().GetString("config")
		cfg, err := loadConfig(cmd.Flags(), file)
		if err != nil {
			t.Fatal(err)
		}
		o, err := brokerOptions(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := adminOptions(cfg, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(a.AllowedHosts); got != c.want {
			t.Errorf("%v %q: %s, want %s", c.args, c.env, got, c.want)
		}
	}
	t.Setenv("EMQ_ADMIN_ALLOWED_ORIGINS", "dash.example")
	if _, err := brokerConfig(t); err == nil || !strings.Contains(err.Error(), "admin-allowed-origins") {
		t.Errorf("an origin without a scheme: %v, want an error naming admin-allowed-origins", err)
	}
}

// --retain-done and its former name --result-ttl are one setting.
func TestRetainDone(t *testing.T) {
	for _, args := range [][]string{{"--retain-done", "90m"}, {"--result-ttl", "90m"}, {"--retain-done", "90m", "--result-ttl", "90m"}} {
		cmd := newBrokerCmd()
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			t.Fatal(err)
		}
		o, err := brokerOptions(c)
		if err != nil || o.ResultTTL != 90*time.Minute {
			t.Errorf("%v: ResultTTL %v, %v; want 1h30m", args, o.ResultTTL, err)
		}
	}
}
