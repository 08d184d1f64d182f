package broker

import (
	"fmt"

	"github.com/eventmq/emq/internal/zmtp"
)

// Check reports whether a broker with opts could serve here now, short of
// its journal: the options valid, the credentials and the CURVE key file
// readable, and every eMQP endpoint free to bind (each is bound and closed
// again). A standby of a group checks it before it campaigns, so that it
// does not win a leadership it cannot use (and load the journal for
// nothing). A port taken between Check and Run still fails Run.
func Check(opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if _, err := loadCredentials(&opts); err != nil {
		return err
	}
	if opts.CurveSecretKeyFile != "" {
		if _, err := zmtp.ReadKeyFile(opts.CurveSecretKeyFile); err != nil {
			return fmt.Errorf("curve-secret-key-file: %w", err)
		}
	}
	for _, ep := range []struct{ name, addr string }{
		{"frontend", opts.Frontend}, {"backend", opts.Backend},
		{"publisher-outgoing", opts.PublisherOutgoing}, {"publisher-incoming", opts.PublisherIncoming},
	} {
		if ep.addr == "" || (ep.name == "publisher-incoming" && opts.PublisherOutgoing == "") {
			continue // not served
		}
		if err := zmtp.CanListen(ep.addr); err != nil {
			return fmt.Errorf("%s: %w", ep.name, err)
		}
	}
	return nil
}
