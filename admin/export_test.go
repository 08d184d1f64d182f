package admin

import (
	"log/slog"
	"net"

	"github.com/eventmq/emq/internal/lograte"
)

// LoopbackOnly is the filter emq-cli's connections go through.
func LoopbackOnly(ln net.Listener) net.Listener {
	return &loopbackOnly{Listener: ln, log: slog.Default(), said: lograte.New(1, "")}
}
