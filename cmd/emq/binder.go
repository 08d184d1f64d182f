package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// binder declares flags, each with the option field it fills, so that a
// flag's name, default (the field's value when it is declared), help and
// field are written once, in a function both the command and the code
// that reads its options call:
//
//	func listenerFlags(b *binder, a *admin.Options) {
//		b.str(&a.Addr, "admin", "HTTP address of the admin API")
//	}
//
// With a FlagSet the binder registers each flag; without one it only
// records where each goes. apply then fills the fields from a loaded
// config (flag, EMQ_<NAME>, config file), with errors that name the key;
// those bound with given (strArray, strSlice, optInt, optNumber,
// givenNumber) from the command line alone.
type binder struct {
	f    *pflag.FlagSet // nil: register nothing
	sets []func(c *config) error
}

// reader is a binder that registers nothing: it reads what a command
// registered before.
func reader() *binder { return &binder{} }

// apply fills every field bound so far from c, stopping at the first
// value that does not parse. A key that c's command has no flag for
// (the admin commands read a group's journal with the broker's group
// settings) is read only when the environment sets it.
func (b *binder) apply(c *config) error {
	for _, set := range b.sets {
		if err := set(c); err != nil {
			return err
		}
	}
	return nil
}

// bind records set for key, called by apply when c has key.
func (b *binder) bind(key string, set func(c *config) error) {
	b.sets = append(b.sets, func(c *config) error {
		if c.flags.Lookup(key) == nil && !c.v.IsSet(key) {
			return nil
		}
		return set(c)
	})
}

// given records set for key, called by apply only when the command line
// gives the flag (the environment does not): a value that is there only
// when asked for.
func (b *binder) given(key string, set func(c *config) error) {
	if b.f != nil {
		// emq config reference lists no environment variable for it.
		_ = b.f.SetAnnotation(key, noEnv, []string{"yes"})
	}
	b.sets = append(b.sets, func(c *config) error {
		if !c.flags.Changed(key) {
			return nil
		}
		return set(c)
	})
}

func (b *binder) str(dst *string, name, usage string) {
	if b.f != nil {
		b.f.String(name, *dst, usage)
	}
	b.bind(name, func(c *config) error { *dst = c.str(name); return nil })
}

// list is a comma-separated flag (a list in a config file).
func (b *binder) list(dst *[]string, name, usage string) {
	if b.f != nil {
		b.f.String(name, strings.Join(*dst, ","), usage)
	}
	b.bind(name, func(c *config) error { *dst = c.list(name); return nil })
}

func (b *binder) duration(dst *time.Duration, name, usage string) {
	if b.f != nil {
		b.f.Duration(name, *dst, usage)
	}
	b.bind(name, func(c *config) (err error) { *dst, err = c.duration(name); return err })
}

func (b *binder) integer(dst *int, name, usage string) {
	if b.f != nil {
		b.f.Int(name, *dst, usage)
	}
	b.bind(name, func(c *config) (err error) { *dst, err = c.integer(name); return err })
}

func (b *binder) boolean(dst *bool, name, usage string) {
	if b.f != nil {
		b.f.Bool(name, *dst, usage)
	}
	b.bind(name, func(c *config) (err error) { *dst, err = c.boolean(name); return err })
}

// float is a number that may have a fraction.
func (b *binder) float(dst *float64, name, usage string) {
	if b.f != nil {
		b.f.Float64(name, *dst, usage)
	}
	b.bind(name, func(c *config) (err error) { *dst, err = c.number(name); return err })
}

// strArray is a repeatable flag, each value whole (--header a=1
// --header b=2), from the command line only.
func (b *binder) strArray(dst *[]string, name, usage string) {
	if b.f != nil {
		b.f.StringArray(name, *dst, usage)
	}
	b.given(name, func(c *config) (err error) { *dst, err = c.flags.GetStringArray(name); return err })
}

// strSlice is a repeatable flag whose values are comma-separated too
// (--after a,b --after c), from the command line only.
func (b *binder) strSlice(dst *[]string, name, usage string) {
	if b.f != nil {
		b.f.StringSlice(name, *dst, usage)
	}
	b.given(name, func(c *config) (err error) { *dst, err = c.flags.GetStringSlice(name); return err })
}

// optInt is a whole number set (*dst not nil) only when the command line
// gives it: nil leaves a setting as it is. Its default says 0.
func (b *binder) optInt(dst **int, name, usage string) {
	if b.f != nil {
		b.f.Int(name, 0, usage)
	}
	b.given(name, func(c *config) error { n, err := c.integer(name); *dst = &n; return err })
}

// optNumber is optInt's number with a fraction (a rate).
func (b *binder) optNumber(dst **float64, name, usage string) {
	if b.f != nil {
		b.f.String(name, "0", usage)
	}
	b.given(name, func(c *config) error { n, err := c.number(name); *dst = &n; return err })
}

// givenNumber is a number with a fraction, written as text, that
// changes *dst only when the command line gives it.
func (b *binder) givenNumber(dst *float64, name, usage string) {
	if b.f != nil {
		b.f.String(name, strconv.FormatFloat(*dst, 'g', -1, 64), usage)
	}
	b.given(name, func(c *config) (err error) { *dst, err = c.number(name); return err })
}

// optSize is a byte count set (*dst not nil) only when it has a value;
// its default is none, "".
func (b *binder) optSize(dst **int64, name, usage string) {
	if b.f != nil {
		b.f.String(name, "", usage)
	}
	b.bind(name, func(c *config) error {
		if c.str(name) == "" {
			return nil
		}
		n, err := c.size(name)
		*dst = &n
		return err
	})
}

// maybe is a boolean that may be left unset (nil): its default depends
// on other options, as its usage says.
func (b *binder) maybe(dst **bool, name, usage string) {
	if b.f != nil {
		b.f.Bool(name, false, usage)
	}
	b.bind(name, func(c *config) error {
		if !c.v.IsSet(name) { // its flag's default is not a value
			return nil
		}
		v, err := c.boolean(name)
		*dst = &v
		return err
	})
}

// size is a byte count, its default written in MiB.
func (b *binder) size(dst *int64, name, usage string) {
	if b.f != nil {
		b.f.String(name, mib(*dst), usage)
	}
	b.bind(name, func(c *config) (err error) { *dst, err = c.size(name); return err })
}

// level is a log level: debug, info, warn or error.
func (b *binder) level(dst *slog.Level, name, usage string) {
	if b.f != nil {
		b.f.String(name, strings.ToLower(dst.String()), usage)
	}
	b.bind(name, func(c *config) error {
		if err := dst.UnmarshalText([]byte(c.str(name))); err != nil {
			return fmt.Errorf("%s: %q is not debug, info, warn or error", name, c.str(name))
		}
		return nil
	})
}

// mib writes a default size as the flags read it (0 as 0).
func mib(n int64) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%dMiB", n>>20)
}
