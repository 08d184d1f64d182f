package client

import (
	"github.com/eventmq/emq/internal/reach"
	"github.com/eventmq/emq/internal/zmtp"
)

// Security is how a client, worker or subscriber proves who it is to a
// broker that wants CURVE or PLAIN: CURVE's ServerKey and SecretKey
// (Z85, as emq keygen writes them), or PLAIN's User and Password. The
// zero value is NULL: no proof, as a broker without keys or users
// expects. Package worker takes the same type.
type Security = reach.Security

// ReadKeyFile reads a key file emq keygen wrote (NAME.key or NAME.pub):
// the key in Z85, for Security.
func ReadKeyFile(path string) (string, error) {
	k, err := zmtp.ReadKeyFile(path)
	if err != nil {
		return "", err
	}
	return k.String(), nil
}
