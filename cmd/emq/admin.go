package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// adminFlags adds the flags of every admin command.
func adminFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	adminTargetFlags(&binder{f: f}, &admin.ClientOptions{Addr: admin.DefaultOptions().Addr}, new(string))
	addEtcdFlags(f, "use a group's journal in etcd directly, at these client URLs (comma-separated; no broker of the group may be running)")
	journalKeysFlag(&binder{f: f}, new(string))
	jsonFlag(&binder{f: f}, new(false), "print JSON instead of a table")
	var where []string
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "json" {
			where = append(where, fl.Name)
		}
	})
	inHelpGroup(f, "Which broker, or which journal directly", where...)
}

// adminTargetFlags declares the flags of every admin command that name a
// running broker's admin API (o), or a journal to open directly (dataDir).
func adminTargetFlags(b *binder, o *admin.ClientOptions, dataDir *string) {
	b.str(&o.Addr, "admin", "a running broker's admin address (host:port, or https://host:port)")
	b.str(&o.Token, "admin-token", "the broker's admin token, or its read-only token (or EMQ_ADMIN_TOKEN)")
	b.str(&o.CA, "admin-ca", "with https: trust this CA certificate (PEM) for the broker's")
	b.str(dataDir, "data-dir", "use the journal in this directory directly (the broker must be stopped)")
}

// openAdmin opens the admin API the flags name: offline on a journal
// (--data-dir, or a group's in etcd with --etcd-endpoints), else a
// running broker's over HTTP (--admin).
func openAdmin(cmd *cobra.Command) (admin.API, *config, error) {
	c, err := loadConfig(cmd.Flags(), "")
	if err != nil {
		return nil, nil, err
	}
	var o admin.ClientOptions
	var dir, keyFile string
	b := reader()
	adminTargetFlags(b, &o, &dir)
	journalKeysFlag(b, &keyFile)
	jsonFlag(b, new(false), "") // read by output: a bad one stops the command before it acts
	if err := b.apply(c); err != nil {
		return nil, nil, err
	}
	keys, err := readJournalKeys(c, keyFile)
	if err != nil {
		return nil, nil, err
	}
	if c.str("etcd-endpoints") != "" {
		g, err := groupOptions(c)
		if err != nil {
			return nil, nil, err
		}
		g.Keys = keys
		j, release, err := group.OpenJournal(g)
		if err != nil {
			return nil, nil, err
		}
		return admin.NewOffline(j, release), c, nil
	}
	if dir != "" {
		a, err := openOffline(dir, o.Addr, keys)
		return a, c, err
	}
	if keys != nil {
		return nil, nil, fmt.Errorf("journal-keys: only with --data-dir (a running broker has its own keys)")
	}
	a, err := admin.NewClient(o)
	return a, c, err
}

// openOffline opens the journal file of a stopped broker.
func openOffline(dir, adminAddr string, keys *store.Keyring) (*admin.Offline, error) {
	path := filepath.Join(dir, broker.JournalFile)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no journal at %s (is --data-dir right?): %w", path, err)
	}
	opts := boltstore.DefaultOptions()
	opts.LockTimeout = 500 * time.Millisecond
	opts.Keys = keys
	j, err := boltstore.Open(path, opts)
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("the journal %s is in use by a running broker: manage it online with --admin %s (its admin address), or stop the broker first", path, adminAddr)
	}
	if err != nil {
		return nil, err
	}
	return admin.NewOffline(j, nil), nil
}
