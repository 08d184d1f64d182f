// Package reach holds what EMQ's client and worker share to reach a
// broker: the Security they prove who they are with (CURVE or PLAIN), and
// asking a broker for its placement (ROUTES). Neither package imports
// the other; both use this one.
package reach

import (
	"errors"
	"fmt"

	"github.com/eventmq/emq/internal/zmtp"
)

// Security is how a client, worker or subscriber proves who it is to a
// broker that wants CURVE or PLAIN. The zero value is NULL: no proof, as
// a broker without keys or users expects.
type Security struct {
	// CURVE: the broker's public key and this peer's secret key, each in
	// Z85 (40 characters, as emq keygen writes them); this peer's public
	// key follows from its secret key and must be in the broker's
	// curve-clients.
	ServerKey, SecretKey string
	// PLAIN: a user of the broker's plain-users and its password (sent
	// in clear: for networks you trust).
	User, Password string
}

// IsZero reports whether s is NULL.
func (s Security) IsZero() bool { return s == Security{} }

// Dial is s as the transport takes it; nil for NULL.
func (s Security) Dial() (*zmtp.ClientSecurity, error) {
	curve, plain := s.ServerKey != "" || s.SecretKey != "", s.User != "" || s.Password != ""
	switch {
	case curve && plain:
		return nil, errors.New("security: CURVE keys and a PLAIN user together; choose one")
	case curve:
		server, err := zmtp.ParseKey(s.ServerKey)
		if err != nil {
			return nil, fmt.Errorf("security: the server key: %w", err)
		}
		secret, err := zmtp.ParseKey(s.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("security: the secret key: %w", err)
		}
		return &zmtp.ClientSecurity{Mechanism: zmtp.Curve, ServerKey: server, Secret: secret, Public: zmtp.PublicKey(secret)}, nil
	case plain:
		if s.User == "" || len(s.User) > 255 || len(s.Password) > 255 {
			return nil, errors.New("security: a PLAIN user of 1 to 255 bytes and a password of at most 255")
		}
		return &zmtp.ClientSecurity{Mechanism: zmtp.Plain, User: s.User, Password: s.Password}, nil
	}
	return nil, nil
}
