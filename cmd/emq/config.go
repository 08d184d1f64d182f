package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/eventmq/emq/store"
)

// config merges a command's flags, EMQ_<NAME> environment variables and an
// optional config file (YAML or TOML, by extension), in that order of
// precedence. Keys are the flag names.
type config struct {
	v     *viper.Viper
	flags *pflag.FlagSet // the command's flags
}

// fileSection is the one part of a config file no flag has: the queues'
// default controls (queueDefaults).
const fileSection = "queues"

// loadConfig binds flags and environment and reads file (if not "").
// Keys in the file that no flag has are refused by name, but for those
// of fileSection.
func loadConfig(flags *pflag.FlagSet, file string) (*config, error) {
	v := viper.New()
	v.SetEnvPrefix("EMQ")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	var known []string // every flag a key, but --help
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && err == nil {
			known = append(known, f.Name)
			err = v.BindPFlag(f.Name, f)
		}
	})
	if err != nil {
		return nil, err
	}
	if file != "" {
		v.SetConfigFile(file)
		switch ext := strings.TrimPrefix(filepath.Ext(file), "."); ext {
		case "yaml", "yml", "toml":
		default:
			return nil, fmt.Errorf("config %s: unknown format %q (use .yaml, .yml or .toml)", file, ext)
		}
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("config %s: %w", file, err)
		}
		for _, k := range v.AllKeys() {
			if !slices.Contains(known, k) && !strings.HasPrefix(k, fileSection+".") {
				if near := closest(k, known); len(near) > 0 {
					return nil, fmt.Errorf("config %s: unknown key %q: did you mean %s?", file, k, strings.Join(near, " or "))
				}
				return nil, fmt.Errorf("config %s: unknown key %q (known: %s)", file, k, strings.Join(known, ", "))
			}
		}
	}
	return &config{v, flags}, nil
}

func (c *config) str(key string) string { return c.v.GetString(key) }

// closest is those of known nearest to key by edit distance, if near
// enough to be a slip: at most a third of key's letters, and 2 or more.
func closest(key string, known []string) []string {
	best, limit := []string(nil), max(2, len(key)/3)
	for _, k := range known {
		switch d := editDistance(key, k); {
		case d < limit:
			best, limit = []string{k}, d
		case d == limit:
			best = append(best, k)
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diag := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			diag, row[j] = row[j], min(row[j]+1, row[j-1]+1, diag+cost)
		}
	}
	return row[len(b)]
}

// scalar is key's value as text; a list or a map (a config file's) is
// refused, saying what was found and what is wanted.
func (c *config) scalar(key, want string) (string, error) {
	switch c.v.Get(key).(type) {
	case []any, []string:
		return "", fmt.Errorf("%s: a list, where %s is wanted", key, want)
	case map[string]any:
		return "", fmt.Errorf("%s: a map of keys, where %s is wanted", key, want)
	}
	return c.v.GetString(key), nil
}

// list reads a list: comma-separated in a flag or the environment, a list
// (or the same string) in a config file.
func (c *config) list(key string) []string {
	var items []string
	switch v := c.v.Get(key).(type) {
	case []any:
		for _, it := range v {
			items = append(items, fmt.Sprint(it))
		}
	case []string:
		items = v
	default:
		items = strings.Split(c.v.GetString(key), ",")
	}
	var out []string
	for _, it := range items {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

func (c *config) duration(key string) (time.Duration, error) {
	s, err := c.scalar(key, "a duration")
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (like 500ms, 5s, 1h)", key, s)
	}
	return d, nil
}

func (c *config) integer(key string) (int, error) {
	s, err := c.scalar(key, "a whole number")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a whole number", key, s)
	}
	return n, nil
}

func (c *config) number(key string) (float64, error) {
	s, err := c.scalar(key, "a number")
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", key, s)
	}
	return n, nil
}

func (c *config) boolean(key string) (bool, error) {
	s, err := c.scalar(key, "true or false")
	if err != nil {
		return false, err
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", key, s)
	}
	return b, nil
}

// size reads a byte count: a number with an optional KiB, MiB or GiB.
func (c *config) size(key string) (int64, error) {
	s, err := c.scalar(key, "a size")
	if err != nil {
		return 0, err
	}
	s = strings.TrimSpace(s)
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = strings.TrimSpace(n), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a size (bytes, or a number with KiB, MiB or GiB)", key, c.v.GetString(key))
	}
	return n * mult, nil
}

// queueDefaults reads the config file's queues section: for each queue,
// paused, concurrency, rate and burst, and its tenants' defaults
// tenant-concurrency, tenant-rate and tenant-burst. Viper reads keys in lower case,
// queue names too.
func (c *config) queueDefaults() (map[string]store.QueueSettings, error) {
	raw := c.v.GetStringMap(fileSection)
	if len(raw) == 0 {
		return nil, nil
	}
	out := make(map[string]store.QueueSettings, len(raw))
	for name := range raw {
		prefix := fileSection + "." + name
		fields, ok := raw[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want paused, concurrency, rate or burst under it, got %v", prefix, raw[name])
		}
		var s store.QueueSettings
		for key, val := range fields {
			var err error
			switch key {
			case "paused":
				s.Paused, err = strconv.ParseBool(fmt.Sprint(val))
			case "concurrency":
				s.Concurrency, err = wholeNumber(val)
			case "burst":
				s.Burst, err = wholeNumber(val)
			case "rate":
				s.Rate, err = strconv.ParseFloat(fmt.Sprint(val), 64)
			case "tenant-concurrency":
				s.TenantConcurrency, err = wholeNumber(val)
			case "tenant-burst":
				s.TenantBurst, err = wholeNumber(val)
			case "tenant-rate":
				s.TenantRate, err = strconv.ParseFloat(fmt.Sprint(val), 64)
			default:
				return nil, fmt.Errorf("%s.%s: unknown key (known: paused, concurrency, rate, burst, tenant-concurrency, tenant-rate, tenant-burst)", prefix, key)
			}
			if err != nil {
				want := "a number"
				switch key {
				case "paused":
					want = "true or false"
				case "concurrency", "burst", "tenant-concurrency", "tenant-burst":
					want = "a whole number"
				}
				return nil, fmt.Errorf("%s.%s: %q is not %s", prefix, key, fmt.Sprint(val), want)
			}
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", prefix, err)
		}
		out[name] = s
	}
	return out, nil
}

// wholeNumber is an int from a config value (YAML and TOML give numbers,
// an environment would give text).
func wholeNumber(v any) (int, error) {
	return strconv.Atoi(fmt.Sprint(v))
}
