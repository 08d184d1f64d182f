package main

import (
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpGroup is the flag annotation naming the heading --help shows a
// flag under, after the command's own flags (those without one).
const helpGroup = "emq-help-group"

// inHelpGroup puts the flags of f named names under heading in --help.
func inHelpGroup(f *pflag.FlagSet, heading string, names ...string) {
	for _, name := range names {
		_ = f.SetAnnotation(name, helpGroup, []string{heading})
	}
}

// defaultFlagsPart is the part of cobra's usage template that lists the
// flags, replaced by flagSections (a test sees that it still is).
const defaultFlagsPart = `{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}`

// addTemplateFunc adds flagSections to cobra's template functions, a
// global map: once, not at each newRoot (tests make roots in parallel).
var addTemplateFunc sync.Once

// groupFlagsInHelp makes root's --help (and its commands') list a
// command's own flags first, then each group of inHelpGroup under its
// heading.
func groupFlagsInHelp(root *cobra.Command) {
	addTemplateFunc.Do(func() { cobra.AddTemplateFunc("flagSections", flagSections) })
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), defaultFlagsPart, "{{flagSections .}}", 1))
}

// flagSections is c's flags for --help: its own, the inherited ones, then
// the groups in the order their first flag comes.
func flagSections(c *cobra.Command) string {
	own := pflag.NewFlagSet("own", pflag.ContinueOnError)
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	groups := map[string]*pflag.FlagSet{}
	var headings []string
	sort := func(into *pflag.FlagSet) func(*pflag.Flag) {
		return func(f *pflag.Flag) {
			h := f.Annotations[helpGroup]
			if len(h) == 0 {
				into.AddFlag(f)
				return
			}
			if groups[h[0]] == nil {
				groups[h[0]] = pflag.NewFlagSet(h[0], pflag.ContinueOnError)
				headings = append(headings, h[0])
			}
			groups[h[0]].AddFlag(f)
		}
	}
	c.LocalFlags().VisitAll(sort(own))
	c.InheritedFlags().VisitAll(sort(global))
	var b strings.Builder
	section := func(heading string, fs *pflag.FlagSet) {
		if fs.HasAvailableFlags() {
			b.WriteString("\n\n" + heading + ":\n" + strings.TrimRight(fs.FlagUsages(), " \n"))
		}
	}
	section("Flags", own)
	section("Global Flags", global)
	for _, h := range headings {
		section(h, groups[h])
	}
	return b.String()
}
