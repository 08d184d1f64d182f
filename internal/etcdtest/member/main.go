// Command member runs one etcd member for tests written in another
// language (the Python package's, clients/python): its configuration is
// the JSON of EMQ_TEST_ETCD_MEMBER, as etcdtest.RunMemberIfAsked reads it
// ({"Name", "Dir", "Peer", "Client", "Cluster"}). It stops on SIGTERM.
package main

import (
	"fmt"
	"os"

	"github.com/eventmq/emq/internal/etcdtest"
)

func main() {
	if os.Getenv(etcdtest.MemberEnv) == "" {
		fmt.Fprintf(os.Stderr, "member: set %s to the member's JSON configuration\n", etcdtest.MemberEnv)
		os.Exit(2)
	}
	etcdtest.RunMemberIfAsked()
}
