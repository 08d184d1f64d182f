package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store/boltstore"
)

// errProblems makes emq exit 1 after a report that found something wrong.
var errProblems = errors.New("the journal has problems (above)")

func newJournalCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "journal", Short: "Check the journal's bytes, salvage what is good of a damaged one (the broker stopped), or seal it again under a new key"}
	journalFlags(&binder{f: cmd.PersistentFlags()}, new(broker.DefaultOptions().DataDir), new(false),
		"directory of the journal file "+broker.JournalFile+" and its log", "print JSON instead of text")
	check := &cobra.Command{
		Use:   "check",
		Short: "Read every byte: bbolt's page check, every value's checksum, the indexes, the log; exit 1 on a problem",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(cmd.Flags(), "")
			if err != nil {
				return err
			}
			path, err := journalPath(c)
			if err != nil {
				return err
			}
			var keyFile string
			b := reader()
			journalKeysFlag(b, &keyFile)
			if err := b.apply(c); err != nil {
				return err
			}
			keys, err := readJournalKeys(c, keyFile)
			if err != nil {
				return err
			}
			rep, err := boltstore.Check(path)
			if err != nil {
				return err
			}
			if keys != nil && len(rep.Structure) == 0 {
				// Every sealed value opened: its tag checked, its key counted.
				if err := boltstore.CheckSealed(path, keys, &rep); err != nil {
					return err
				}
			}
			if err := output(cmd, c, rep, func(w io.Writer) { printCheck(w, rep) }); err != nil {
				return err
			}
			if !rep.OK() {
				cmd.SilenceUsage = true
				return errProblems
			}
			return nil
		},
	}
	salvage := &cobra.Command{
		Use:   "salvage --to DIR",
		Short: "Write every good value and log record into a new journal in DIR, and list what could not be kept",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadConfig(cmd.Flags(), "")
			if err != nil {
				return err
			}
			path, err := journalPath(c)
			if err != nil {
				return err
			}
			var to string
			b := reader()
			salvageFlags(b, &to)
			if err := b.apply(c); err != nil {
				return err
			}
			if to == "" {
				return errors.New("to: name the folder of the new journal with --to DIR (a new one: nothing is overwritten)")
			}
			rep, err := boltstore.Salvage(path, filepath.Join(to, broker.JournalFile))
			if err != nil {
				return err
			}
			return output(cmd, c, rep, func(w io.Writer) {
				fmt.Fprintf(w, "salvaged %s into %s: %d jobs, %d values in all, %d log records replayed\n", rep.From, rep.To, rep.Jobs, rep.Values, rep.LogRecords)
				for _, p := range rep.Pages {
					fmt.Fprintf(w, "read page by page\t%s\n", p)
				}
				if len(rep.Lost) == 0 {
					fmt.Fprintln(w, "nothing was lost")
				}
				for _, l := range rep.Lost {
					fmt.Fprintf(w, "lost\t%s\n", l)
				}
				fmt.Fprintf(w, "start the broker on it with --data-dir %s\n", to)
			})
		},
	}
	salvageFlags(&binder{f: salvage.Flags()}, new(""))
	journalKeysFlag(&binder{f: check.Flags()}, new(""))
	cmd.AddCommand(check, salvage, newJournalRekeyCmd())
	return cmd
}

// salvageFlags declares emq journal salvage's own flag.
func salvageFlags(b *binder, to *string) {
	b.str(to, "to", "folder of the new journal (must not hold one)")
}

func printCheck(w io.Writer, r boltstore.CheckReport) {
	fmt.Fprintf(w, "file\t%s\nvalues checked\t%d\njobs\t%d\nlog records after the checkpoint (%d)\t%d\n",
		r.File, r.Values, r.Jobs, r.Checkpoint, r.Records)
	for _, s := range r.Structure {
		fmt.Fprintf(w, "file structure\t%s\n", s)
	}
	for _, d := range r.Damaged {
		fmt.Fprintf(w, "damaged value\t%s\n", d)
	}
	for _, d := range r.Dangling {
		fmt.Fprintf(w, "index entry\t%s\n", d)
	}
	for _, id := range r.Unindexed {
		fmt.Fprintf(w, "job in no index\t%q\n", id)
	}
	for _, c := range r.LogDamage {
		fmt.Fprintf(w, "damaged log\t%s\n", c)
	}
	for _, c := range r.LogPassed {
		fmt.Fprintf(w, "damaged log, checkpointed\t%s\n", c)
	}
	if r.Torn != nil {
		fmt.Fprintf(w, "torn log tail\t%s (never acknowledged; the next open cuts it)\n", r.Torn)
	}
	for _, q := range r.Quarantined {
		fmt.Fprintf(w, "moved aside\t%s/%q at %s: %s\n", q.Bucket, q.Key, q.Found.Format("2006-01-02T15:04:05Z07:00"), q.Reason)
	}
	if len(r.EncryptedWith) > 0 {
		fmt.Fprintf(w, "encrypted at rest: yes (keys %s)\n", strings.Join(r.EncryptedWith, ", "))
	} else {
		fmt.Fprintln(w, "encrypted at rest: no")
	}
	for _, name := range slices.Sorted(maps.Keys(r.SealedBy)) {
		if name == "" {
			fmt.Fprintf(w, "values in clear\t%d\n", r.SealedBy[name])
		} else {
			fmt.Fprintf(w, "values under key %s\t%d\n", name, r.SealedBy[name])
		}
	}
	for _, d := range r.Unsealed {
		fmt.Fprintf(w, "value that does not open\t%s\n", d)
	}
	if r.OK() {
		fmt.Fprintln(w, "ok: every byte checks")
	} else {
		fmt.Fprintln(w, "problems found: a broker serves what is good (damaged jobs go to the dead letters); emq journal salvage --to DIR writes what is good into a new journal")
	}
}
