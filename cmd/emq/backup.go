package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

func newBackupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup --to FILE",
		Short: "Copy the journal, as one moment, into a backup file (from a running broker too)",
		Long: `Write a backup of the journal to --to FILE: every job, dead letter, kept
result, schedule, queue control, unique key and batch, as one moment that
holds every job ACKed before it began (the broker goes on serving). From a
running broker with --admin (its full admin token: a backup holds every
payload), or a stopped one's with --data-dir, or a group's journal in etcd
with --etcd-endpoints (a running group too: its journal is read, not
claimed). The file ends with a SHA-256 checksum of its bytes, which this
command checks before it keeps the file; emq restore checks it again.
The format is the same for every journal: a group's backup restores into
one broker's --data-dir, and back.`,
		Args: cobra.NoArgs,
	}
	adminFlags(cmd)
	backupFlags(&binder{f: cmd.Flags()}, new(""), new(*int64))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var to, dir string
		var given *int64
		var keyFile string
		b := reader()
		backupFlags(b, &to, &given)
		adminTargetFlags(b, new(admin.ClientOptions), &dir)
		journalKeysFlag(b, &keyFile)
		if err := b.apply(c); err != nil {
			return err
		}
		if to == "" {
			return errors.New("to: the backup file is required (--to FILE)")
		}
		pace := int64(admin.DefaultBackupPace) // a broker, or a group's etcd, serves meanwhile
		if dir != "" {
			pace = 0 // a stopped broker's file
		}
		if given != nil {
			pace = *given
		}
		var a admin.API
		if c.str("etcd-endpoints") != "" {
			g, err := groupOptions(c)
			if err != nil {
				return err
			}
			if g.Keys, err = readJournalKeys(c, keyFile); err != nil {
				return err
			}
			j, release, err := group.ReadJournal(g)
			if err != nil {
				return err
			}
			a = admin.NewOffline(j, release)
		} else if a, _, err = openAdmin(cmd); err != nil {
			return err
		}
		defer a.Close()
		start := time.Now()
		partial := to + ".partial"
		f, err := os.OpenFile(partial, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("to: %w", err)
		}
		_, err = a.Backup(cmd.Context(), f, pace)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(partial)
			return fmt.Errorf("backup: %w", err)
		}
		st, err := checkBackupFile(partial)
		if err != nil {
			os.Remove(partial)
			return fmt.Errorf("backup: what came is not whole: %w", err)
		}
		if err := os.Rename(partial, to); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %d jobs, %d records, %d bytes, sha256 %s, in %v\n", to, st.Jobs, st.Records, st.Bytes, st.Sum,
			time.Since(start).Round(time.Millisecond))
		return nil
	}
	return cmd
}

// backupFlags declares emq backup's own flags.
func backupFlags(b *binder, to *string, pace **int64) {
	b.str(to, "to", "the backup file to write (required)")
	b.optSize(pace, "pace", "bytes a second the backup may take (KiB, MiB; 0 = as fast as it goes); default: 32MiB with --admin or --etcd-endpoints (a broker serves meanwhile), 0 with --data-dir")
}

func checkBackupFile(path string) (store.BackupStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return store.BackupStats{}, err
	}
	defer f.Close()
	return store.CheckBackup(f)
}

func newRestoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore --from FILE (--data-dir DIR | --etcd-endpoints URLS)",
		Short: "Make a journal of a backup file: what it held, as it was",
		Long: `Check the backup --from FILE whole (its checksum, its format), then write
it into the journal in --data-dir (made if there is none) or a group's
journal in etcd (--etcd-endpoints, --etcd-prefix). A broker started on it
finds every job as it was: pending ones pending, those in flight at the
backup pending again, dead letters, kept results, schedules, queue
controls, unique keys, batches. A journal that holds anything is refused
unless --force, which deletes what it holds first. A journal a running
broker (or group) holds is refused.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	restoreFlags(&binder{f: f}, new(restoreOptions))
	addEtcdFlags(f, "restore into a group's journal in etcd, at these client URLs (comma-separated; no broker of the group may be running)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := loadConfig(cmd.Flags(), "")
		if err != nil {
			return err
		}
		var o restoreOptions
		b := reader()
		restoreFlags(b, &o)
		if err := b.apply(c); err != nil {
			return err
		}
		from := o.from
		if from == "" {
			return errors.New("from: the backup file is required (--from FILE)")
		}
		st, err := checkBackupFile(from)
		if err != nil {
			return fmt.Errorf("from %s: %w", from, err)
		}
		keys, err := readJournalKeys(c, o.keys)
		if err != nil {
			return err
		}
		if len(st.Header.Keys) > 0 && keys == nil {
			return fmt.Errorf("from %s: %w: the backup is encrypted at rest with keys %s: restore it with --journal-keys naming a file that holds them",
				from, store.ErrKeys, strings.Join(st.Header.Keys, ", "))
		}
		for _, k := range st.Header.Keys { // before the journal is opened (and names the file's first key)
			if !slices.Contains(keys.Names(), k) {
				return fmt.Errorf("from %s: %w: the backup is encrypted at rest with key %s, which %s does not hold", from, store.ErrKeys, k, keys.File())
			}
		}
		var j store.Journal
		release := func() {}
		switch dir := o.dataDir; {
		case c.str("etcd-endpoints") != "":
			g, err := groupOptions(c)
			if err != nil {
				return err
			}
			g.Keys = keys
			if j, release, err = group.OpenJournal(g); err != nil {
				return err
			}
		case dir != "":
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("data-dir: %w", err)
			}
			path := filepath.Join(dir, broker.JournalFile)
			opts := boltstore.DefaultOptions()
			opts.LockTimeout = 500 * time.Millisecond
			opts.Keys = keys
			bj, err := boltstore.Open(path, opts)
			if errors.Is(err, store.ErrLocked) {
				return fmt.Errorf("the journal %s is in use by a running broker: stop it before restoring into it", path)
			}
			if err != nil {
				return err
			}
			j = bj
		default:
			return errors.New("data-dir or etcd-endpoints: name the journal to restore into")
		}
		bk, ok := j.(store.Backuper)
		if !ok {
			j.Close()
			release()
			return fmt.Errorf("the journal %T cannot restore a backup", j)
		}
		err = restoreInto(bk, from, o.force)
		if cerr := j.Close(); err == nil {
			err = cerr
		}
		release()
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "restored %s: %d jobs, %d records (made %s by %s)\n", from, st.Jobs, st.Records,
			st.Header.Created.Format(time.RFC3339), st.Header.MadeBy)
		return nil
	}
	return cmd
}

// restoreOptions are emq restore's flags, but the etcd ones.
type restoreOptions struct {
	from, dataDir, keys string
	force               bool
}

// restoreFlags declares emq restore's flags, but the etcd ones.
func restoreFlags(b *binder, o *restoreOptions) {
	b.str(&o.from, "from", "the backup file (required)")
	b.str(&o.dataDir, "data-dir", "the broker's data directory to restore into")
	b.boolean(&o.force, "force", "delete what the journal holds before restoring")
	journalKeysFlag(b, &o.keys)
}

// restoreInto writes the backup file into bk, empty or emptied (force).
func restoreInto(bk store.Backuper, from string, force bool) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = bk.Restore(f, force)
	switch {
	case errors.Is(err, store.ErrNotEmpty):
		return fmt.Errorf("%w: restore into an empty one, or --force to delete what it holds first", err)
	case errors.Is(err, store.ErrPartialRestore):
		return fmt.Errorf("%w; restore again with --force once the file is whole", err)
	}
	return err
}
