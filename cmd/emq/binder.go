package main

import (
	"fmt"
	"log/slog"
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
// config (flag, EMQ_<NAME>, config file), with errors that name the key.
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
		if !c.flags[key] && !c.v.IsSet(key) {
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

// mib writes a default size as the flags read it.
func mib(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }
