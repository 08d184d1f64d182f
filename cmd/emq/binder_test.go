package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// binderOpts stands for a component's options.
type binderOpts struct {
	name  string
	hosts []string
	every time.Duration
	n     int
	on    bool
	size  int64
	level slog.Level
}

func binderFlags(b *binder, o *binderOpts) {
	b.str(&o.name, "name", "a name")
	b.list(&o.hosts, "hosts", "hosts, comma-separated")
	b.duration(&o.every, "every", "how often")
	b.integer(&o.n, "n", "how many")
	b.boolean(&o.on, "on", "whether")
	b.size(&o.size, "size", "how big")
	b.level(&o.level, "level", "how loud")
}

// A flag is declared with its field's value as its default; apply fills
// each field from the flag, the environment or the file, and names the
// key of a value that does not parse.
func TestBinderFillsItsFields(t *testing.T) {
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	binderFlags(&binder{f: f}, &binderOpts{name: "x", hosts: []string{"a", "b"}, every: 5 * time.Second, n: 1, size: 2 << 20, level: slog.LevelWarn})
	for name, def := range map[string]string{"name": "x", "hosts": "a,b", "every": "5s", "n": "1", "on": "false", "size": "2MiB", "level": "warn"} {
		if fl := f.Lookup(name); fl == nil || fl.DefValue != def {
			t.Errorf("--%s: %+v, want the default %q", name, fl, def)
		}
	}
	if got := f.Lookup("every").Usage; got != "how often" {
		t.Errorf("--every's help: %q", got)
	}

	if err := f.Parse([]string{"--n", "3"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EMQ_EVERY", "7s")
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("hosts: [c, d]\nsize: 1KiB\non: true\n"), 0o644)
	c, err := loadConfig(f, file)
	if err != nil {
		t.Fatal(err)
	}
	var o binderOpts
	b := reader()
	binderFlags(b, &o)
	if err := b.apply(c); err != nil {
		t.Fatal(err)
	}
	want := binderOpts{name: "x", hosts: []string{"c", "d"}, every: 7 * time.Second, n: 3, on: true, size: 1024, level: slog.LevelWarn}
	if o.name != want.name || !slices.Equal(o.hosts, want.hosts) || o.every != want.every || o.n != want.n ||
		o.on != want.on || o.size != want.size || o.level != want.level {
		t.Errorf("applied: %+v, want %+v", o, want)
	}

	for _, bad := range []struct{ env, value, msg string }{
		{"EMQ_SIZE", "lots", `size: "lots" is not a size (bytes, or a number with KiB, MiB or GiB)`},
		{"EMQ_LEVEL", "loud", `level: "loud" is not debug, info, warn or error`},
		{"EMQ_EVERY", "often", `every: "often" is not a duration (like 500ms, 5s, 1h)`},
	} {
		t.Setenv(bad.env, bad.value)
		c, err := loadConfig(f, "")
		if err != nil {
			t.Fatal(err)
		}
		b := reader()
		binderFlags(b, new(binderOpts))
		if err := b.apply(c); err == nil || err.Error() != bad.msg {
			t.Errorf("%s=%s: %v, want %q", bad.env, bad.value, err, bad.msg)
		}
		os.Unsetenv(bad.env) // t.Setenv puts back what was there at the end
	}
}

// A key the command has no flag for keeps its field's value, unless the
// environment sets it (the admin commands read a group's journal with
// the broker's group settings).
func TestBinderKeyWithoutFlag(t *testing.T) {
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.String("name", "", "")
	read := func() int {
		t.Helper()
		c, err := loadConfig(f, "")
		if err != nil {
			t.Fatal(err)
		}
		o := binderOpts{n: 42}
		b := reader()
		binderFlags(b, &o)
		if err := b.apply(c); err != nil {
			t.Fatal(err)
		}
		return o.n
	}
	if n := read(); n != 42 {
		t.Errorf("n with no flag and no EMQ_N: %d, want 42 as it was", n)
	}
	t.Setenv("EMQ_N", "5")
	if n := read(); n != 5 {
		t.Errorf("n with EMQ_N=5: %d", n)
	}
}

// givenOpts stands for a command's options that are there only when
// given.
type givenOpts struct {
	n       *int
	rate    *float64
	ratio   float64
	share   float64
	pace    *int64
	headers []string
	after   []string
}

func givenFlags(b *binder, o *givenOpts) {
	b.optInt(&o.n, "n", "how many")
	b.optNumber(&o.rate, "rate", "how fast")
	b.givenNumber(&o.share, "share", "what part")
	b.float(&o.ratio, "ratio", "what ratio")
	b.optSize(&o.pace, "pace", "how much a second")
	b.strArray(&o.headers, "header", "a header (repeatable)")
	b.strSlice(&o.after, "after", "msgids")
}

// The options that are set only when given keep nil (or their value)
// unless the command line gives them: the environment does not; those
// it does give are read as given, bad numbers named by key.
func TestBinderGivenOnCommandLine(t *testing.T) {
	read := func(args ...string) (givenOpts, error) {
		t.Helper()
		f := pflag.NewFlagSet("test", pflag.ContinueOnError)
		givenFlags(&binder{f: f}, &givenOpts{ratio: 0.5})
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := loadConfig(f, "")
		if err != nil {
			t.Fatal(err)
		}
		o := givenOpts{share: 0.25}
		b := reader()
		givenFlags(b, &o)
		return o, b.apply(c)
	}
	f := pflag.NewFlagSet("test", pflag.ContinueOnError)
	givenFlags(&binder{f: f}, &givenOpts{ratio: 0.5})
	for name, def := range map[string]string{"n": "0", "rate": "0", "share": "0", "ratio": "0.5", "pace": "", "header": "[]", "after": "[]"} {
		if fl := f.Lookup(name); fl == nil || fl.DefValue != def {
			t.Errorf("--%s: %+v, want the default %q", name, fl, def)
		}
	}

	t.Setenv("EMQ_N", "3")
	t.Setenv("EMQ_RATE", "2.5")
	t.Setenv("EMQ_SHARE", "0.75")
	t.Setenv("EMQ_HEADER", "a=1")
	t.Setenv("EMQ_AFTER", "x")
	o, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if o.n != nil || o.rate != nil || o.share != 0.25 || o.headers != nil || o.after != nil || o.pace != nil || o.ratio != 0.5 {
		t.Errorf("with nothing on the command line: %+v, want nothing set but ratio's default", o)
	}

	o, err = read("--n", "0", "--rate", "1.5", "--share", "0.1", "--header", "a=1,b", "--header", "c", "--after", "x,y", "--after", "z", "--pace", "2KiB", "--ratio", "2")
	if err != nil {
		t.Fatal(err)
	}
	if o.n == nil || *o.n != 0 || o.rate == nil || *o.rate != 1.5 || o.share != 0.1 || o.ratio != 2 || o.pace == nil || *o.pace != 2048 ||
		!slices.Equal(o.headers, []string{"a=1,b", "c"}) || !slices.Equal(o.after, []string{"x", "y", "z"}) {
		t.Errorf("given: %+v", o)
	}

	t.Setenv("EMQ_PACE", "1KiB")
	if o, err = read(); err != nil || o.pace == nil || *o.pace != 1024 {
		t.Errorf("pace from EMQ_PACE: %v, %v", o.pace, err)
	}
	if _, err = read("--rate", "fast"); err == nil || err.Error() != `rate: "fast" is not a number` {
		t.Errorf("--rate fast: %v", err)
	}
	t.Setenv("EMQ_RATIO", "half")
	if _, err = read(); err == nil || err.Error() != `ratio: "half" is not a number` {
		t.Errorf("EMQ_RATIO=half: %v", err)
	}
}
