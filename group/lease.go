package group

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// renew keeps a lease alive and says when it may have ended.
//
// etcd's client renews a lease over one long-lived stream, on whichever
// member it was opened to; when that member goes silent (partitioned,
// paused) the renewals go nowhere, the lease ends, and the group fails
// over although two members of three are fine (measured: a failover, then
// another for the standby whose stream was on the same member). So the
// group renews the lease itself too: a one-off keepalive every TTL/3,
// each a new request that goes to a member that answers (see members.go),
// bounded by TTL/3.
//
// The lease lives at least a TTL past the sending of a renewal that
// succeeded (etcd counts from when it applies it, later; a new etcd
// leader extends every lease by more), measured on uptime's clock. The returned
// channel is closed once that bound has passed with no later success, or
// etcd says the lease is gone, or ctx ends: from then on the lease may
// have ended, and whoever held it must stop acting on it.
func renew(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID, granted, ttl time.Duration) <-chan struct{} {
	expired := make(chan struct{})
	go func() {
		defer close(expired)
		valid := granted + ttl // until when (uptime) the lease surely lives
		for {
			sent := uptime()
			kctx, cancel := context.WithTimeout(ctx, ttl/3)
			resp, err := cli.KeepAliveOnce(kctx, id)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				return
			case err == nil && resp.TTL > 0:
				valid = sent + ttl
			}
			if uptime() >= valid {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(sent+ttl/3, valid) - uptime()):
			}
			if uptime() >= valid {
				return
			}
		}
	}()
	return expired
}
