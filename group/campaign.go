package group

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// campaign runs for the group's leadership on session until this broker
// leads (it returns its election), ctx ends, or the lease ends (expired:
// a key of an ended lease is gone, and must not win; nil: never).
//
// It is etcd's concurrency.Election.Campaign (a key per lease under the
// prefix; the oldest key leads) with waits that end. That one waits for
// the key before it to be deleted on one watch stream, which stays on
// the member it was opened to: a member gone silent (partitioned,
// paused) never tells, and the standby would not take over until that
// member came back. And on cancel it resigns with no deadline. Here the
// watch is only the quick way: the key is read again every recheck,
// each read going to a member that answers (members.go); a cancelled
// campaign leaves its key to the lease, which the term's end revokes.
func campaign(ctx context.Context, session *concurrency.Session, prefix, name string, timeout time.Duration, expired <-chan struct{}) (*concurrency.Election, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-expired:
			cancel()
		case <-ctx.Done():
		}
	}()
	cli := session.Client()
	key := fmt.Sprintf("%s%x", prefix, session.Lease())
	var rev int64
	err := bounded(ctx, timeout, func(ctx context.Context) error {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, name, clientv3.WithLease(session.Lease()))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return err
		}
		rev = resp.Header.Revision
		if !resp.Succeeded { // put before, by a call that timed out
			rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
		}
		return nil
	})
	for err == nil {
		var before string // the newest key older than this one
		var at int64
		err = bounded(ctx, timeout, func(ctx context.Context) error {
			resp, err := cli.Get(ctx, prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)
			if err != nil {
				return err
			}
			if len(resp.Kvs) > 0 {
				before, at = string(resp.Kvs[0].Key), resp.Header.Revision
			}
			return nil
		})
		if err != nil || before == "" {
			break
		}
		wctx, stop := context.WithTimeout(ctx, recheck)
		deleted := false
		for wr := range cli.Watch(wctx, before, clientv3.WithRev(at+1), clientv3.WithFilterPut()) {
			if deleted = len(wr.Events) > 0; deleted {
				break
			}
		}
		if !deleted {
			<-wctx.Done() // a watch that failed at once is no reason to read again at once
		}
		stop()
		err = ctx.Err()
	}
	select {
	case <-expired:
		return nil, fmt.Errorf("this broker's lease ended while it campaigned (etcd away for its TTL)")
	default:
	}
	if err != nil {
		return nil, err
	}
	return concurrency.ResumeElection(session, prefix, key, rev), nil
}

// recheck is how long a campaign trusts its watch before it reads again.
const recheck = 500 * time.Millisecond

// bounded runs f with ctx bounded by timeout.
func bounded(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}
