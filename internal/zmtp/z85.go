package zmtp

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/curve25519"
)

// Z85 (ZeroMQ RFC 32) is how CURVE keys are written as text: 32 bytes
// as 40 printable characters, as libzmq's zmq_z85_encode writes them.

const z85Chars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

var z85Value = func() (v [256]byte) {
	for i := range v {
		v[i] = 0xff
	}
	for i := range len(z85Chars) {
		v[z85Chars[i]] = byte(i)
	}
	return v
}()

// Z85Encode writes b (a multiple of 4 bytes long) as Z85.
func Z85Encode(b []byte) string {
	var s strings.Builder
	for i := 0; i+4 <= len(b); i += 4 {
		v := uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		var chunk [5]byte
		for k := 4; k >= 0; k-- {
			chunk[k] = z85Chars[v%85]
			v /= 85
		}
		s.Write(chunk[:])
	}
	return s.String()
}

// Z85Decode reads Z85 text (a multiple of 5 characters long).
func Z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("z85: %d characters, not a multiple of 5", len(s))
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for k := range 5 {
			d := z85Value[s[i+k]]
			if d == 0xff {
				return nil, fmt.Errorf("z85: %q is not a Z85 character", s[i+k])
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return nil, errors.New("z85: a group is over 32 bits")
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out, nil
}

// Key is a Curve25519 key (public or secret).
type Key [32]byte

// ParseKey reads a key written in Z85 (40 characters).
func ParseKey(s string) (Key, error) {
	var k Key
	s = strings.TrimSpace(s)
	if len(s) != 40 {
		return k, fmt.Errorf("a CURVE key is 40 Z85 characters, not %d", len(s))
	}
	b, err := Z85Decode(s)
	if err != nil {
		return k, err
	}
	copy(k[:], b)
	return k, nil
}

// ReadKeyFile reads a key file as emq keygen writes it (NAME.key or
// NAME.pub): one Z85 line.
func ReadKeyFile(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, err
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return k, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// String is the key in Z85.
func (k Key) String() string { return Z85Encode(k[:]) }

// NewKeyPair makes a CURVE key pair, as zmq_curve_keypair does.
func NewKeyPair() (public, secret Key, err error) {
	if _, err = rand.Read(secret[:]); err != nil {
		return
	}
	return PublicKey(secret), secret, nil
}

// PublicKey is the public key of secret.
func PublicKey(secret Key) Key {
	var pub Key
	curve25519.ScalarBaseMult((*[32]byte)(&pub), (*[32]byte)(&secret))
	return pub
}
