package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/crypto/bcrypt"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

func newKeygenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keygen (NAME | --journal NAME [--to FILE])",
		Short: "Make a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub; or a journal key (--journal)",
		Long: `Make a CURVE key pair as libzmq's zmq_curve_keypair does, each key one Z85
line: NAME.key is the secret key (mode 0600), NAME.pub the public key. The
broker takes its own with --curve-secret-key-file and lists its peers'
public keys in --curve-clients; a client or worker takes its own with
--curve-key-file and the broker's public key with --curve-server-key.

With --journal NAME, make a key to encrypt the journal at rest instead:
one line, NAME and 32 random bytes in base64, to standard output or to a
new file --to FILE (mode 0600). The broker's --journal-keys names a file
of such lines, the first encrypting (docs/security.md).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if j, _ := cmd.Flags().GetString("journal"); j != "" {
				return cobra.NoArgs(cmd, args)
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		Annotations: map[string]string{noEnv: "yes"},
	}
	force := cmd.Flags().Bool("force", false, "replace NAME.key and NAME.pub (or --to FILE) if they exist")
	journal := cmd.Flags().String("journal", "", "make a journal key of this name (1 to 32 of A-Z a-z 0-9 . _ -) for --journal-keys")
	to := cmd.Flags().String("to", "", "with --journal: write the key's line to this new file (mode 0600) instead of standard output")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *journal != "" {
			return journalKeygen(cmd, *journal, *to, *force)
		}
		if *to != "" {
			return fmt.Errorf("to: only with --journal (a CURVE pair goes to NAME.key and NAME.pub)")
		}
		pub, secret, err := zmtp.NewKeyPair()
		if err != nil {
			return err
		}
		flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
		if *force {
			flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		}
		for _, f := range []struct {
			path string
			key  zmtp.Key
			mode os.FileMode
		}{{args[0] + ".key", secret, 0o600}, {args[0] + ".pub", pub, 0o644}} {
			w, err := os.OpenFile(f.path, flags, f.mode)
			if err != nil {
				if errors.Is(err, os.ErrExist) {
					return fmt.Errorf("%s exists; --force replaces it", f.path)
				}
				return err
			}
			_, err = fmt.Fprintln(w, f.key)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s.key (secret) and %s.pub: %s\n", args[0], args[0], pub)
		return nil
	}
	return cmd
}

// journalKeygen writes a new journal key's line to w, or to the new
// file to (mode 0600).
func journalKeygen(cmd *cobra.Command, name, to string, force bool) error {
	line, err := store.NewJournalKey(name)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if to == "" {
		_, err := io.WriteString(cmd.OutOrStdout(), line)
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	w, err := os.OpenFile(to, flags, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists; --force replaces it (a key file may hold several keys: add the line yourself, the encrypting key first)", to)
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, line)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "journal key %s written to %s\n", name, to)
	}
	return err
}

func newPasswdCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passwd FILE USER ROLES",
		Short: "Add or replace a PLAIN user in a --plain-users file",
		Long: `Add USER to FILE, or replace it, with ROLES (comma-separated: client,
worker, subscriber) and a bcrypt hash of its password. The password is
asked for (without echo) on a terminal, or read from standard input's
first line. The broker re-reads the file on SIGHUP. PLAIN sends the
password in clear: use it on networks you trust, CURVE elsewhere.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, name, roles := args[0], args[1], args[2]
			if name == "" || strings.ContainsAny(name, ":# \t\n") || len(name) > 255 {
				return fmt.Errorf("user %q: want 1 to 255 bytes without ':', '#' or spaces", name)
			}
			if _, err := broker.ParseRoles(roles); err != nil {
				return err
			}
			password, err := readPassword(cmd)
			if err != nil {
				return err
			}
			hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
			if err != nil {
				return err
			}
			old, err := os.ReadFile(file)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			var out strings.Builder
			replaced := false
			for line := range strings.SplitSeq(strings.TrimRight(string(old), "\n"), "\n") {
				if user, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(user) == name {
					line, replaced = "", true
					fmt.Fprintf(&out, "%s:%s:%s\n", name, hash, roles)
					continue
				}
				if line != "" || out.Len() > 0 {
					out.WriteString(line + "\n")
				}
			}
			if !replaced {
				fmt.Fprintf(&out, "%s:%s:%s\n", name, hash, roles)
			}
			tmp := file + ".tmp"
			if err := os.WriteFile(tmp, []byte(out.String()), 0o600); err != nil {
				return err
			}
			if err := os.Rename(tmp, file); err != nil {
				return err
			}
			verb := "added"
			if replaced {
				verb = "replaced"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s in %s (send the broker SIGHUP to use it)\n", verb, name, file)
			return nil
		},
	}
}

// readPassword asks on a terminal without echo, or reads standard
// input's first line.
func readPassword(cmd *cobra.Command) (string, error) {
	in := cmd.InOrStdin()
	if isTerminal(in) {
		f := in.(*os.File)
		fmt.Fprint(cmd.ErrOrStderr(), "Password: ")
		stty := func(arg string) error {
			c := exec.Command("stty", arg)
			c.Stdin = f
			return c.Run()
		}
		if stty("-echo") == nil {
			defer func() { _ = stty("echo"); fmt.Fprintln(cmd.ErrOrStderr()) }()
		}
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return "", errors.New("an empty password")
	}
	if len(password) > 72 {
		return "", errors.New("a password of at most 72 bytes (bcrypt reads no more)")
	}
	return password, nil
}

// credentials are what a peer's security flags name.
type credentials struct{ serverKey, keyFile, user, password string }

// securityFlags declares the flags of a peer's credentials for a broker
// that wants CURVE or PLAIN (each also EMQ_<FLAG>).
func securityFlags(b *binder, p *credentials) {
	b.str(&p.serverKey, "curve-server-key", "the broker's CURVE public key: Z85, or a file emq keygen wrote (NAME.pub)")
	b.str(&p.keyFile, "curve-key-file", "this peer's CURVE secret key file (NAME.key from emq keygen)")
	b.str(&p.user, "plain-user", "a PLAIN user of the broker's plain-users")
	b.str(&p.password, "plain-password", "its password (better in EMQ_PLAIN_PASSWORD than on the command line)")
}

// addSecurityFlags adds securityFlags to f.
func addSecurityFlags(f *pflag.FlagSet) { securityFlags(&binder{f: f}, new(credentials)) }

// securityFrom reads the flags addSecurityFlags added.
func securityFrom(c *config) (client.Security, error) {
	var s client.Security
	var p credentials
	b := reader()
	securityFlags(b, &p)
	if err := b.apply(c); err != nil {
		return s, err
	}
	server, keyFile := p.serverKey, p.keyFile
	if (server == "") != (keyFile == "") {
		return s, errors.New("curve-server-key and curve-key-file go together: set both, or neither")
	}
	switch {
	case strings.HasSuffix(keyFile, ".pub"): // any 32 bytes pass as a secret: this mistake is silent else
		return s, fmt.Errorf("curve-key-file: %s is a public key file; give this peer's secret key, NAME.key", keyFile)
	case strings.HasSuffix(server, ".key"):
		return s, fmt.Errorf("curve-server-key: %s is a secret key file; give the broker's public key, NAME.pub (its secret stays with the broker)", server)
	}
	if server != "" {
		var err error
		if _, perr := zmtp.ParseKey(server); perr == nil {
			s.ServerKey = server
		} else if s.ServerKey, err = client.ReadKeyFile(server); err != nil {
			return s, fmt.Errorf("curve-server-key: neither a Z85 key nor a key file: %w", err)
		}
		if s.SecretKey, err = client.ReadKeyFile(keyFile); err != nil {
			return s, fmt.Errorf("curve-key-file: %w", err)
		}
	}
	s.User, s.Password = p.user, p.password
	if (s.User == "") != (s.Password == "") {
		return s, errors.New("plain-user and plain-password go together: set both, or neither")
	}
	return s, nil
}
