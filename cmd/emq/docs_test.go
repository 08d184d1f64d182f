package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The README and docs/ stay true: every relative link leads to a file
// (and its #anchor to a heading there), and every emq command they show
// names subcommands and flags the binary has.
func TestDocsLinksAndCommands(t *testing.T) {
	t.Parallel()
	repo := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(repo, "README.md")}, files...)
	root := newRoot()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	commands := 0
	for _, file := range files {
		doc := readDoc(t, file)
		for _, l := range doc.links {
			if err := checkLink(file, l.target); err != nil {
				t.Errorf("%s:%d: link %s: %v", file, l.line, l.target, err)
			}
		}
		for _, c := range doc.commands {
			commands++
			if err := checkCommand(root, c.args); err != nil {
				t.Errorf("%s:%d: %q: %v", file, c.line, strings.Join(c.args, " "), err)
			}
		}
	}
	t.Logf("%d emq commands checked", commands)
	if commands < 50 {
		t.Errorf("found %d emq commands in the docs; the reader is broken", commands)
	}
}

// The checker itself: a broken link, a missing anchor, an unknown
// subcommand and an unknown flag are each caught.
func TestDocsCheckerCatchesMistakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	page := filepath.Join(dir, "page.md")
	text := "# Page\n\n## Two words\n\n[ok](page.md#two-words) [gone](nothere.md) [anchor](page.md#nope)\n\n" +
		"```sh\nemq queues pause email   # fine\nemq jobz ls\nemq send --no-such-flag x\n```\n\nAnd `emq dlq retry --queue q`.\n"
	if err := os.WriteFile(page, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := readDoc(t, page)
	var bad []string
	for _, l := range doc.links {
		if checkLink(page, l.target) != nil {
			bad = append(bad, l.target)
		}
	}
	root := newRoot()
	for _, c := range doc.commands {
		if checkCommand(root, c.args) != nil {
			bad = append(bad, strings.Join(c.args, " "))
		}
	}
	want := "nothere.md|page.md#nope|jobz ls|send --no-such-flag x"
	if got := strings.Join(bad, "|"); got != want {
		t.Errorf("caught %q, want %q", got, want)
	}
}

type docLink struct {
	line   int
	target string
}

type docCommand struct {
	line int
	args []string // after emq
}

type doc struct {
	links    []docLink
	commands []docCommand
}

var (
	linkRe   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineRe = regexp.MustCompile("`[^`]+`")
)

// readDoc finds a markdown file's links (outside code) and its emq
// commands: in shell code blocks, and in inline code that starts with emq.
func readDoc(t *testing.T, file string) doc {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d doc
	lines := strings.Split(string(b), "\n")
	// Prose is read a paragraph at a time: inline code may span lines.
	var para []string
	paraLine := 0
	prose := func() {
		text := strings.Join(para, " ")
		for _, span := range inlineRe.FindAllString(text, -1) {
			words := shellWords(strings.Trim(span, "`"))
			if len(words) > 0 && isEmq(words[0]) {
				d.commands = append(d.commands, docCommand{paraLine, words[1:]})
			}
		}
		for _, m := range linkRe.FindAllStringSubmatch(inlineRe.ReplaceAllString(text, ""), -1) {
			d.links = append(d.links, docLink{paraLine, m[1]})
		}
		para = para[:0]
	}
	inCode, shell := false, false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if fence, ok := strings.CutPrefix(strings.TrimSpace(line), "```"); ok {
			prose()
			inCode = !inCode
			lang := strings.TrimSpace(fence)
			shell = inCode && (lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console")
			continue
		}
		if inCode {
			if !shell {
				continue
			}
			start := i + 1
			for strings.HasSuffix(line, `\`) && i+1 < len(lines) { // a command continued
				i++
				line = strings.TrimSuffix(line, `\`) + " " + lines[i]
			}
			for _, args := range shellCommands(line) {
				d.commands = append(d.commands, docCommand{start, args})
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			prose()
			continue
		}
		if len(para) == 0 {
			paraLine = i + 1
		}
		para = append(para, line)
	}
	prose()
	return d
}

func isEmq(word string) bool {
	switch word {
	case "emq", "bin/emq", "./bin/emq", "/usr/local/bin/emq":
		return true
	}
	return false
}

var subcommandWord = regexp.MustCompile(`^[a-z][a-z|-]*$`)

// shellCommands returns the arguments of each emq command on a shell
// line: a word emq (or bin/emq) followed by a subcommand or a flag, up to
// the end of its simple command. "sudo -u emq" and file names are not
// commands.
func shellCommands(line string) [][]string {
	words := shellWords(line)
	var out [][]string
	for i := 0; i < len(words); i++ {
		if !isEmq(words[i]) || i+1 >= len(words) {
			continue
		}
		if i > 0 && (words[i-1] == "-u" || words[i-1] == "-g" || words[i-1] == "--user") {
			continue
		}
		if next := words[i+1]; !subcommandWord.MatchString(next) && !strings.HasPrefix(next, "-") {
			continue
		}
		j := i + 1
		for j < len(words) && !isShellBreak(words[j]) {
			j++
		}
		out = append(out, words[i+1:j])
		i = j
	}
	return out
}

func isShellBreak(w string) bool {
	switch w {
	case "|", "||", "&", "&&", ";", ")", "<", ">", ">>", "2>", "2>>", "<<":
		return true
	}
	return strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>")
}

// shellWords splits a line as a shell would, roughly: quotes kept
// together, a # comment cut, ; | & ( ) as words of their own.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	in := false // cur holds a word
	var quote rune
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '#' && !in:
			flush()
			return words
		case unicode.IsSpace(r):
			flush()
		case strings.ContainsRune(";|&()", r):
			flush()
			words = append(words, string(r))
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	flush()
	// "$(" and "&&" come out as two words; join what matters.
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "&" && words[i+1] == "&" || words[i] == "|" && words[i+1] == "|" {
			words[i] += words[i+1]
			words = append(words[:i+1], words[i+2:]...)
		}
	}
	return words
}

// checkCommand walks args down the command tree: each word names a
// subcommand until the first flag or the first positional argument of
// a command that runs; every flag must be one that command has.
// "ls|show" names two subcommands, both checked.
func checkCommand(root *cobra.Command, args []string) error {
	cmd := root
	i := 0
	for ; i < len(args); i++ {
		w := strings.Trim(args[i], "[]")
		if strings.HasPrefix(w, "-") || !cmd.HasSubCommands() {
			break
		}
		var next *cobra.Command
		for _, alt := range strings.Split(w, "|") {
			sub := subcommand(cmd, alt)
			if sub == nil {
				if cmd.Runnable() && next == nil && !strings.Contains(w, "|") {
					break // a positional argument of cmd
				}
				return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), alt)
			}
			if next == nil {
				next = sub
			}
		}
		if next == nil {
			break
		}
		cmd = next
	}
	for ; i < len(args); i++ {
		w := strings.Trim(args[i], "[]")
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" || strings.Trim(w, "-0123456789.") == "" {
			continue
		}
		name, _, _ := strings.Cut(w, "=")
		if name == "--help" || name == "-h" {
			continue
		}
		if !hasFlag(cmd, name) {
			return fmt.Errorf("%s has no flag %s", cmd.CommandPath(), name)
		}
	}
	return nil
}

// hasFlag reports whether cmd takes the flag --name or -n: its own, its
// persistent ones (merged into Flags only when it runs) or a parent's.
func hasFlag(cmd *cobra.Command, name string) bool {
	for _, f := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if long, ok := strings.CutPrefix(name, "--"); ok {
			if f.Lookup(long) != nil {
				return true
			}
		} else if short := strings.TrimPrefix(name, "-"); len(short) == 1 && f.ShorthandLookup(short) != nil {
			return true
		}
	}
	return false
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// checkLink checks a link of file: an address elsewhere is not checked;
// a relative one must name a file in the repository, and its #anchor a
// heading of it.
func checkLink(file, target string) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	path, anchor, _ := strings.Cut(target, "#")
	full := file
	if path != "" {
		full = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
	}
	if _, err := os.Stat(full); err != nil {
		return fmt.Errorf("no such file")
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(full, ".md") {
		return fmt.Errorf("an anchor into a file that is not markdown")
	}
	b, err := os.ReadFile(full)
	if err != nil {
		return err
	}
	if !headingAnchors(string(b))[anchor] {
		return fmt.Errorf("no heading with the anchor #%s in %s", anchor, path)
	}
	return nil
}

// headingAnchors returns the anchors GitHub gives a page's headings:
// lower case, punctuation dropped, spaces as hyphens, -1, -2... for
// repeats.
func headingAnchors(text string) map[string]bool {
	anchors := make(map[string]bool)
	seen := make(map[string]int)
	inCode := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		title, ok := strings.CutPrefix(line, "#")
		if inCode || !ok {
			continue
		}
		title = strings.TrimLeft(title, "#")
		if !strings.HasPrefix(title, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}
