package store

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Encryption at rest (encrypt.go): a Keyring is the journal's keys, read
// from a file of lines "NAME BASE64" (the key's 32 bytes); blank lines
// and lines starting with # are passed over. The first key encrypts, all
// of them decrypt: a journal names, in its meta bucket, every key it was
// ever encrypted with, and opens only with all of them.

// KeySize is a journal key's size: AES-256.
const KeySize = 32

// MaxKeyName is the longest key name.
const MaxKeyName = 32

// ErrKeys is a journal whose encryption keys were not given, or are not
// the keys it was encrypted with; the error names the key and the file.
var ErrKeys = errors.New("journal encryption keys")

// Keyring is the keys a journal is encrypted with (encrypt.go).
type Keyring struct {
	file string // where the keys were read, for errors
	keys []ringKey
}

type ringKey struct {
	name string
	aead cipher.AEAD
}

// ReadKeyring reads a key file.
func ReadKeyring(file string) (*Keyring, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("journal-keys: %w", err)
	}
	return ParseKeyring(file, data)
}

// ParseKeyring reads the lines of a key file named file (in errors).
func ParseKeyring(file string, data []byte) (*Keyring, error) {
	k := &Keyring{file: file}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("journal-keys %s: line %d: %s", file, n, fmt.Sprintf(format, args...))
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, bad("want NAME BASE64 (a key's name and its 32 bytes in base64; emq keygen --journal NAME writes one), got %d fields", len(f))
		}
		if err := checkKeyName(f[0]); err != nil {
			return nil, bad("%v", err)
		}
		raw, err := base64.StdEncoding.DecodeString(f[1])
		if err != nil {
			return nil, bad("key %s is not base64: %v", f[0], err)
		}
		if len(raw) != KeySize {
			return nil, bad("key %s is %d bytes, want %d (AES-256)", f[0], len(raw), KeySize)
		}
		if k.find(f[0]) != nil {
			return nil, bad("key %s is named twice", f[0])
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, bad("key %s: %v", f[0], err)
		}
		k.keys = append(k.keys, ringKey{name: f[0], aead: aead})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("journal-keys %s: %w", file, err)
	}
	if len(k.keys) == 0 {
		return nil, fmt.Errorf("journal-keys %s: no key in it (a line each: NAME BASE64; emq keygen --journal NAME writes one)", file)
	}
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// checkKeyName refuses a name that is not 1 to MaxKeyName of
// [A-Za-z0-9._-].
func checkKeyName(name string) error {
	if name == "" || len(name) > MaxKeyName {
		return fmt.Errorf("key name %q: want 1 to %d characters", name, MaxKeyName)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("key name %q: only letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

// NewJournalKey returns a new key's line for a key file: the name and 32
// random bytes in base64.
func NewJournalKey(name string) (string, error) {
	if err := checkKeyName(name); err != nil {
		return "", err
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	return name + " " + base64.StdEncoding.EncodeToString(key) + "\n", nil
}

// File is where the keys were read.
func (k *Keyring) File() string { return k.file }

// Names are the keys' names, the one that encrypts first.
func (k *Keyring) Names() []string {
	out := make([]string, len(k.keys))
	for i, r := range k.keys {
		out[i] = r.name
	}
	return out
}

func (k *Keyring) find(name string) *ringKey {
	for i := range k.keys {
		if k.keys[i].name == name {
			return &k.keys[i]
		}
	}
	return nil
}

// With is a ring of the keys named, in that order (the first encrypts).
func (k *Keyring) With(names ...string) (*Keyring, error) {
	out := &Keyring{file: k.file}
	for _, n := range names {
		rk := k.find(n)
		if rk == nil {
			return nil, fmt.Errorf("journal-keys %s: no key %s", k.file, n)
		}
		out.keys = append(out.keys, *rk)
	}
	return out, nil
}
