package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "emq",
		Short:         "EMQ: a durable job-queue broker speaking eMQP over ZeroMQ",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newBrokerCmd(), newWorkerCmd(), newSendCmd(), newPubCmd(), newSubCmd(),
		newStatsCmd(), newQueuesCmd(), newShardsCmd(), newTailCmd(), newWorkersCmd(), newJobsCmd(), newTenantsCmd(), newLimitersCmd(), newDLQCmd(), newSchedulesCmd(), newBatchesCmd(),
		newMigrateCmd(), newCompactCmd(), newJournalCmd(), newBackupCmd(), newRestoreCmd(), newBenchCmd(), newKeygenCmd(), newPasswdCmd(), newConfigCmd(), newVersionCmd())
	groupFlagsInHelp(root)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintln(cmd.OutOrStdout(), "emq", v)
			return nil
		},
	}
}
