package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "The journal file's schema (the broker migrates at start too)"}
	journalFlags(&binder{f: cmd.PersistentFlags()}, new(broker.DefaultOptions().DataDir), new(false),
		"directory of the journal file", "print JSON instead of a table")
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the file's schema version and each step",
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
			v, steps, err := boltstore.Migrations(path)
			if err != nil {
				return err
			}
			type step struct {
				Version int    `json:"version"`
				Name    string `json:"name"`
				Applied bool   `json:"applied"`
			}
			var out []step
			for _, s := range steps {
				out = append(out, step{s.Version, s.Name, s.Applied})
			}
			return output(cmd, c, map[string]any{"version": v, "steps": out}, func(w io.Writer) {
				fmt.Fprintf(w, "file %s is at version %d\n", path, v)
				for _, s := range out {
					mark := "pending"
					if s.Applied {
						mark = "applied"
					}
					fmt.Fprintf(w, "%d\t%s\t%s\n", s.Version, s.Name, mark)
				}
			})
		},
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply the steps the file lacks",
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
			opts := boltstore.DefaultOptions()
			opts.LockTimeout = 500 * time.Millisecond
			from, to, err := boltstore.Migrate(path, opts)
			if errors.Is(err, store.ErrLocked) {
				return fmt.Errorf("%w (a running broker has migrated it already at its start)", err)
			}
			if err != nil {
				return err
			}
			if from == to {
				fmt.Fprintf(cmd.OutOrStdout(), "already at version %d\n", to)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrated from version %d to %d\n", from, to)
			return nil
		},
	}
	cmd.AddCommand(status, up)
	return cmd
}

// journalFlags declares the flags of the commands on a stopped broker's
// journal file (emq journal, emq migrate), with their help texts.
func journalFlags(b *binder, dataDir *string, asJSON *bool, dirHelp, jsonHelp string) {
	b.str(dataDir, "data-dir", dirHelp)
	jsonFlag(b, asJSON, jsonHelp)
}

// journalPath is the journal file in --data-dir. It reads --json too, so
// that a bad one stops the command before it acts.
func journalPath(c *config) (string, error) {
	var dir string
	b := reader()
	journalFlags(b, &dir, new(false), "", "")
	if err := b.apply(c); err != nil {
		return "", err
	}
	return filepath.Join(dir, broker.JournalFile), nil
}

func newCompactCmd() *cobra.Command {
	cmd := adminCmd("compact", "Rewrite the journal file without its free space", cobra.NoArgs,
		func(cmd *cobra.Command, a admin.API, c *config, _ []string) error {
			st, err := a.Compact(cmd.Context())
			if err != nil {
				return err
			}
			return output(cmd, c, map[string]int64{"size_before": st.Before, "size_after": st.After}, func(w io.Writer) {
				fmt.Fprintf(w, "journal compacted: %d bytes before, %d after\n", st.Before, st.After)
			})
		})
	adminFlags(cmd)
	return cmd
}
