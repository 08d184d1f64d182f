package main

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eventmq/emq/admin"
)

// noEnv marks a command whose flags come from the command line alone (it
// does not read EMQ_* variables).
const noEnv = "emq/no-env"

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Every option of every command; a check of a broker's config file"}
	ref := &cobra.Command{
		Use:   "reference",
		Short: "Print every option of every command (flag, environment variable, config key, default, meaning) as Markdown",
		Long: `Print every option of every command, from the definitions the commands
themselves use: the flag, its environment variable, its key in a config
file (emq broker --config), its default and what it means. docs/config.md
is this output (go run ./cmd/emq config reference > docs/config.md); a
test fails when the two differ.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeReference(cmd.OutOrStdout(), newRoot())
		},
	}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a broker's config file (unknown keys, bad values, by name) without starting anything",
		Long: `Read FILE as emq broker --config FILE would (with the EMQ_* variables
of the environment, as the broker would see them), and check every
option as the broker would before it starts: unknown keys, values that
do not parse, and settings that do not go together are named. Nothing
is opened, bound or written. Exit status 0 when the broker would start
with it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkBrokerConfig(args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), args[0]+": ok")
			return nil
		},
	}
	cmd.AddCommand(ref, check)
	return cmd
}

// checkBrokerConfig reads a broker's config file and builds every option
// the broker would, stopping at the first that is wrong.
func checkBrokerConfig(file string) error {
	flags := newBrokerCmd().Flags()
	c, err := loadConfig(flags, file)
	if err != nil {
		return err
	}
	opts, err := brokerOptions(c)
	if err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	if _, err := logLevel(c); err != nil {
		return err
	}
	if _, err := adminOptions(c, opts); err != nil {
		return err
	}
	if c.str("etcd-endpoints") != "" {
		g, err := groupSetup(c, &opts)
		if err != nil {
			return err
		}
		if _, err := shardOptions(c, g, admin.Options{}); err != nil {
			return err
		}
	}
	return nil
}

// logLevel reads --log-level.
func logLevel(c *config) (slog.Level, error) {
	level := slog.LevelInfo
	b := reader()
	logLevelFlag(b, &level)
	return level, b.apply(c)
}

// referenceIntro opens the reference (~ stands for a backtick).
const referenceIntro = `# EMQ configuration reference

Every option of every ~emq~ command, written by ~emq config reference~ from
the definitions the commands use (~go run ./cmd/emq config reference > docs/config.md~;
a test fails when this file and the commands differ).

An option is a flag, ~--name value~. Where a command reads the environment,
~EMQ_NAME~ (upper case, ~-~ as ~_~) sets it too, and a flag given wins over it.
~emq broker --config FILE~ also reads a YAML or TOML file whose keys are the flag
names (a flag or a variable wins over the file); a key no flag has is refused by
name, but for the section ~queues:~, the queues' default controls
(~queues: {email: {concurrency: 4, rate: 10, burst: 20, paused: false}}~).
~emq config check FILE~ checks such a file without starting anything. Sizes take
KiB, MiB or GiB; durations look like ~500ms~, ~5s~, ~1h~.
`

// writeReference writes the reference of every command under root.
func writeReference(w io.Writer, root *cobra.Command) error {
	var b strings.Builder
	b.WriteString(strings.ReplaceAll(referenceIntro, "~", "`"))
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" || cmd.Name() == "completion" {
			return
		}
		if cmd.Runnable() {
			section(&b, cmd)
		}
		children := cmd.Commands()
		slices.SortFunc(children, func(x, y *cobra.Command) int { return strings.Compare(x.Name(), y.Name()) })
		for _, c := range children {
			walk(c)
		}
	}
	walk(root)
	_, err := io.WriteString(w, b.String())
	return err
}

// machineDefaults are the defaults this machine sets, said as the broker
// works them out: the reference is the same on every machine.
var machineDefaults = map[string]string{
	"max-receive-buffer": "an eighth of the memory (at least 256MiB)",
	"max-connections":    "3/4 of the fd limit",
	// Not a machine's, but one that depends on other options.
	"admin-show-payloads": "unset: true with no admin token set, false with one",
}

// section writes one command's options.
func section(b *strings.Builder, cmd *cobra.Command) {
	fmt.Fprintf(b, "\n## %s\n\n%s.\n", cmd.CommandPath(), cmd.Short)
	var flags []*pflag.Flag
	seen := map[string]bool{}
	for _, set := range []*pflag.FlagSet{cmd.LocalFlags(), cmd.InheritedFlags()} {
		set.VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" && !f.Hidden && !seen[f.Name] {
				seen[f.Name] = true
				flags = append(flags, f)
			}
		})
	}
	slices.SortFunc(flags, func(x, y *pflag.Flag) int { return strings.Compare(x.Name, y.Name) })
	if len(flags) == 0 {
		b.WriteString("\nNo options.\n")
		return
	}
	env := cmd.Annotations[noEnv] == ""
	file := cmd.Flags().Lookup("config") != nil
	b.WriteString("\n| Flag | Environment | Config key | Default | Meaning |\n|---|---|---|---|---|\n")
	for _, f := range flags {
		e, k := "–", "–"
		if env && f.Name != "config" && f.Annotations[noEnv] == nil {
			e = "`EMQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")) + "`"
		}
		if file && f.Name != "config" {
			k = "`" + f.Name + "`"
		}
		def := f.DefValue
		switch {
		case machineDefaults[f.Name] != "":
			def = machineDefaults[f.Name]
		case def == "" || def == "[]":
			def = "–"
		default:
			def = "`" + def + "`"
		}
		usage := strings.ReplaceAll(f.Usage, "|", "\\|")
		fmt.Fprintf(b, "| `--%s` | %s | %s | %s | %s |\n", f.Name, e, k, def, usage)
	}
}
