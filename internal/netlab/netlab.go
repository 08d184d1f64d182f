// Package netlab builds a private network on one Linux machine for
// fault tests: each node a network namespace (ip netns) with one veth
// link to a bridge, the bridge in a namespace of its own, and the test
// process itself a node (the host) on the same bridge. Partitions are
// nftables rules that drop what a node receives from another: no error
// reaches either side's sockets, as on a real network that stops
// carrying packets. Nothing leaves the machine: the addresses are a
// private /24 that only the host's lab link routes.
//
// It needs root, iproute2 and nftables (Debian: iproute2, nftables).
// Where they are missing, New skips the test, or fails it when
// EMQ_REQUIRE_NETNS is set (CI sets it).
package netlab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/eventmq/emq/internal/testutil"
)

// RequireEnv makes a missing namespace facility fail the test.
const RequireEnv = "EMQ_REQUIRE_NETNS"

// Lab is one private network and its nodes.
type Lab struct {
	t      testing.TB
	tag    string // unique on this machine: in every name the lab makes
	prefix string // "10.213.N.": the lab's /24
	host   *Node
	mu     sync.Mutex
	nodes  []*Node
	cuts   []cut
}

// Node is one place on the lab's network: a namespace, or the host.
type Node struct {
	Name string
	NS   string // the namespace; "" for the host
	IP   string
	lab  *Lab
}

// cut drops what to receives from from; ports, when set, only the TCP
// traffic to those ports of to and back.
type cut struct {
	from, to *Node
	ports    []int
}

// Available says why a lab cannot be made here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (Debian: iproute2, nftables)", tool)
		}
	}
	return nil
}

// New makes a lab: its bridge and the host's link to it, removed at
// cleanup (after the nodes' processes, which tests stop in their own
// cleanups registered later).
func New(t testing.TB) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		testutil.Missing(t, RequireEnv, "netlab: %v", err)
	}
	sweep()
	l := &Lab{t: t, tag: fmt.Sprintf("%x", os.Getpid())}
	for n := os.Getpid() % 250; ; n = (n + 1) % 250 {
		prefix := fmt.Sprintf("10.213.%d.", n+1)
		if !routed(prefix + "1") {
			l.prefix = prefix
			break
		}
	}
	t.Cleanup(l.remove)
	sw := l.ns("sw")
	l.run("ip", "netns", "add", sw)
	l.run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", sw, "link", "set", "br0", "up")
	hostLink := "emq" + l.tag
	l.run("ip", "link", "add", hostLink, "type", "veth", "peer", "name", "p0", "netns", sw)
	l.host = &Node{Name: "host", IP: l.prefix + "1", lab: l}
	l.attach(sw, "p0")
	l.run("ip", "addr", "add", l.host.IP+"/24", "dev", hostLink)
	l.run("ip", "link", "set", hostLink, "up")
	l.run("nft", "add", "table", "inet", l.hostTable())
	l.run("nft", "add", "chain", "inet", l.hostTable(), "in", "{ type filter hook input priority 0; }")
	return l
}

// Host is the test process's own node.
func (l *Lab) Host() *Node { return l.host }

// Node adds a node: a namespace linked to the bridge, with loopback.
func (l *Lab) Node(name string) *Node {
	l.t.Helper()
	l.mu.Lock()
	n := &Node{Name: name, NS: l.ns(name), IP: fmt.Sprintf("%s%d", l.prefix, len(l.nodes)+2), lab: l}
	port := fmt.Sprintf("p%d", len(l.nodes)+1)
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	l.run("ip", "netns", "add", n.NS)
	l.run("ip", "link", "add", "eth0", "netns", n.NS, "type", "veth", "peer", "name", port, "netns", l.ns("sw"))
	l.attach(l.ns("sw"), port)
	l.run("ip", "-n", n.NS, "addr", "add", n.IP+"/24", "dev", "eth0")
	l.run("ip", "-n", n.NS, "link", "set", "eth0", "up")
	l.run("ip", "-n", n.NS, "link", "set", "lo", "up")
	l.run("ip", "netns", "exec", n.NS, "nft", "add", "table", "inet", "emqlab")
	l.run("ip", "netns", "exec", n.NS, "nft", "add", "chain", "inet", "emqlab", "in", "{ type filter hook input priority 0; }")
	return n
}

// Command runs a program in the node's namespace. The process is the
// program itself (ip netns exec execs it): signals reach it directly.
// It gets SIGKILL if the test binary dies first.
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if n.NS != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
	}
	testutil.DieWithParent(cmd)
	return cmd
}

// Addr is the node's address with port, host:port.
func (n *Node) Addr(port int) string { return fmt.Sprintf("%s:%d", n.IP, port) }

// Cut stops every packet between a and b, both ways, until Heal. The
// methods that change cuts may be called from any test's goroutine: they
// return their error, for the caller's test to report.
func (l *Lab) Cut(a, b *Node) error {
	l.mu.Lock()
	l.cuts = append(l.cuts, cut{from: a, to: b}, cut{from: b, to: a})
	l.mu.Unlock()
	return l.apply(a, b)
}

// CutPorts stops the TCP traffic between a and the given ports of b,
// both ways, until Heal: a cannot reach those services of b, and
// reaches the rest.
func (l *Lab) CutPorts(a, b *Node, ports ...int) error {
	l.mu.Lock()
	l.cuts = append(l.cuts, cut{from: a, to: b, ports: ports})
	l.mu.Unlock()
	return l.apply(a, b)
}

// Isolate cuts n from each of from.
func (l *Lab) Isolate(n *Node, from ...*Node) error {
	var errs []error
	for _, o := range from {
		errs = append(errs, l.Cut(n, o))
	}
	return errors.Join(errs...)
}

// Heal removes every cut between a and b.
func (l *Lab) Heal(a, b *Node) error {
	l.mu.Lock()
	var kept []cut
	for _, c := range l.cuts {
		if !(c.from == a && c.to == b || c.from == b && c.to == a) {
			kept = append(kept, c)
		}
	}
	l.cuts = kept
	l.mu.Unlock()
	return l.apply(a, b)
}

// HealAll removes every cut.
func (l *Lab) HealAll() error {
	l.mu.Lock()
	l.cuts = nil
	nodes := append([]*Node{l.host}, l.nodes...)
	l.mu.Unlock()
	return l.apply(nodes...)
}

// apply writes the input rules of the given nodes from the cuts.
func (l *Lab) apply(nodes ...*Node) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range nodes {
		table := "emqlab"
		if n.NS == "" {
			table = l.hostTable()
		}
		var script strings.Builder
		fmt.Fprintf(&script, "flush chain inet %s in\n", table)
		for _, c := range l.cuts {
			switch {
			case len(c.ports) == 0 && c.to == n:
				fmt.Fprintf(&script, "add rule inet %s in ip saddr %s drop\n", table, c.from.IP)
			case len(c.ports) > 0 && c.to == n: // the service's side
				fmt.Fprintf(&script, "add rule inet %s in ip saddr %s tcp dport { %s } drop\n", table, c.from.IP, portList(c.ports))
			case len(c.ports) > 0 && c.from == n: // the caller's side: the answers
				fmt.Fprintf(&script, "add rule inet %s in ip saddr %s tcp sport { %s } drop\n", table, c.to.IP, portList(c.ports))
			}
		}
		cmd := n.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("netlab: nft on %s: %v: %s", n.Name, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// routed says whether a route other than the default covers ip.
func routed(ip string) bool {
	out, _ := exec.Command("ip", "-4", "route", "show", "to", "match", ip).Output()
	for line := range strings.Lines(string(out)) {
		if !strings.HasPrefix(line, "default") {
			return true
		}
	}
	return false
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ", ")
}

func (l *Lab) ns(name string) string { return "emq" + l.tag + "-" + name }
func (l *Lab) hostTable() string     { return "emqlab" + l.tag }

// attach puts port, in namespace sw, on the bridge and up.
func (l *Lab) attach(sw, port string) {
	l.run("ip", "-n", sw, "link", "set", port, "master", "br0")
	l.run("ip", "-n", sw, "link", "set", port, "up")
}

func (l *Lab) run(name string, args ...string) {
	l.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		l.t.Fatalf("netlab: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// sweep removes what labs of test processes that no longer run left
// behind (killed before their cleanups): namespaces, the host's links and
// nftables tables, all named after the pid.
func sweep() {
	gone := func(hexPid string) bool {
		pid, err := strconv.ParseInt(hexPid, 16, 32)
		return err == nil && syscall.Kill(int(pid), 0) == syscall.ESRCH
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			if tag, ok := strings.CutPrefix(name, "emq"); ok {
				if pid, _, ok := strings.Cut(tag, "-"); ok && gone(pid) {
					exec.Command("ip", "netns", "del", name).Run()
				}
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show", "type", "veth").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if pid, ok := strings.CutPrefix(name, "emq"); ok && gone(pid) {
				exec.Command("ip", "link", "del", name).Run()
			}
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for line := range strings.Lines(string(out)) {
			f := strings.Fields(line) // table inet NAME
			if len(f) == 3 {
				if pid, ok := strings.CutPrefix(f[2], "emqlab"); ok && pid != "" && gone(pid) {
					exec.Command("nft", "delete", "table", f[1], f[2]).Run()
				}
			}
		}
	}
}

// remove deletes what New and Node made; errors are ignored (a part may
// never have been made).
func (l *Lab) remove() {
	exec.Command("nft", "delete", "table", "inet", l.hostTable()).Run()
	exec.Command("ip", "link", "del", "emq"+l.tag).Run()
	l.mu.Lock()
	nodes := l.nodes
	l.mu.Unlock()
	for _, n := range nodes {
		exec.Command("ip", "netns", "del", n.NS).Run()
	}
	exec.Command("ip", "netns", "del", l.ns("sw")).Run()
}
