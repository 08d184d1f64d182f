package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"

	"github.com/eventmq/emq/internal/testutil"
)

const (
	unitFile   = "systemd/emq-broker.service"
	configFile = "systemd/emq.yaml"
	unitBinary = "/usr/local/bin/emq" // the unit's ExecStart
)

// systemd-analyze verify finds nothing to say about the unit (its
// ExecStart pointed at an emq built here: verify wants it to exist).
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_SYSTEMD", "systemd-analyze is not installed (apt-get install -y systemd)")
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "\nExecStart="+unitBinary+" ") {
		t.Fatalf("%s: no ExecStart=%s", unitFile, unitBinary)
	}
	// verify wants ExecStart's program to exist and be executable, no
	// more: this test's own binary stands in for emq, unbuilt.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit = []byte(strings.Replace(string(unit), "ExecStart="+unitBinary, "ExecStart="+self, 1))
	path := filepath.Join(dir, filepath.Base(unitFile))
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}

// The example config is one the broker starts with: emq config check
// reads it as emq broker --config would (unknown keys, values, settings
// that do not go together).
func TestSystemdConfigChecks(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(buildEmq(t), "config", "check", configFile)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EMQ_") { // the file alone, not this environment's settings
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("emq config check %s: %v\n%s", configFile, err, out)
	}
}

// The unit and the example config agree: the data-dir is the unit's
// StateDirectory, and the unit waits for the drain-timeout and the
// journal's last checkpoint before it kills the broker.
func TestSystemdUnitFitsConfig(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	setting := func(key string) string {
		m := regexp.MustCompile(`(?m)^` + key + `=(.*)$`).FindSubmatch(unit)
		if m == nil {
			t.Fatalf("%s: no %s=", unitFile, key)
		}
		return string(m[1])
	}
	v := viper.New()
	v.SetConfigFile(configFile)
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	if dir, want := v.GetString("data-dir"), "/var/lib/"+setting("StateDirectory"); dir != want {
		t.Errorf("%s: data-dir %s, want the unit's StateDirectory, %s", configFile, dir, want)
	}
	stop, err := time.ParseDuration(setting("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("%s: TimeoutStopSec: %v (write it as 90s, say)", unitFile, err)
	}
	drain := v.GetDuration("drain-timeout")
	// The checkpoint at close writes up to journal-max-log into emq.db.
	const checkpoint = time.Minute
	if drain <= 0 || stop < drain+checkpoint {
		t.Errorf("%s: TimeoutStopSec=%v; it must exceed the drain-timeout of %s (%v) by %v at least", unitFile, stop, configFile, drain, checkpoint)
	}
	for _, want := range []string{"Type=notify", "KillMode=mixed", "ExecReload=/bin/kill -HUP $MAINPID"} {
		if key, value, _ := strings.Cut(want, "="); setting(key) != value {
			t.Errorf("%s: %s=%s, want %s", unitFile, key, setting(key), want)
		}
	}
}

// buildEmq builds the emq command into a temporary directory.
func buildEmq(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "emq")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/eventmq/emq/cmd/emq").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
