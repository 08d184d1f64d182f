package broker

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/zmtp"
)

// Who may do what on the eMQP endpoints. Without CURVE or PLAIN every
// peer may do everything (NULL: loopback, and original EventMQ peers,
// which cannot set keys). With them:
//
//   - A peer proves who it is in its handshake: a CURVE client by its key
//     pair, listed in CurveClients; a PLAIN peer by a user and password,
//     listed in PlainUsers (a bcrypt hash). Any other is refused there,
//     counted (emq_handshakes_failed_total) and logged, a few lines a
//     second at most. The frontend and backend offer both mechanisms
//     that are configured; the PUB endpoint admits subscribers only.
//   - Each listed peer has roles. A message its roles do not allow gets
//     ERROR forbidden and changes nothing: a client may send REQUEST,
//     SCHEDULE, UNSCHEDULE and PUBLISH; a worker INFORM, READY, REPLY
//     and FAIL (a scheduler INFORMs too: it needs the worker role); a
//     subscriber may subscribe. HEARTBEAT and DISCONNECT are anyone's.
//   - Wrong PLAIN passwords are slowed (guesses): MaxGuesses from one
//     address within GuessWindow, and its PLAIN handshakes are refused
//     unchecked until the window passes; bcrypt runs on half the CPUs
//     at most.
//   - ReloadCredentials (SIGHUP) re-reads both files: a peer removed, or
//     whose roles or password changed, is disconnected and cannot
//     connect again as it was.
//   - An eMQP endpoint on a non-loopback address needs CURVE or PLAIN,
//     or AllowAnonymous.

// Roles are what a CURVE key or a PLAIN user may do: a set of the roles
// below. (What a peer INFORMed as is its peerRole, peers.go.)
type Roles uint32

// The roles.
const (
	RoleClient Roles = 1 << iota
	RoleWorker
	RoleSubscriber
)

var roleNames = map[string]Roles{"client": RoleClient, "worker": RoleWorker, "subscriber": RoleSubscriber}

// commandRole is the role each command needs (0 = anyone's).
var commandRole = map[string]Roles{
	string(emqp.CmdRequest): RoleClient, string(emqp.CmdSchedule): RoleClient,
	string(emqp.CmdUnschedule): RoleClient, string(emqp.CmdPublish): RoleClient,
	string(emqp.CmdInform): RoleWorker, string(emqp.CmdReady): RoleWorker,
	string(emqp.CmdReply): RoleWorker, string(emqp.CmdFail): RoleWorker,
	string(emqp.CmdCancel): RoleClient, string(emqp.CmdProgress): RoleWorker,
	string(emqp.CmdBulk): RoleClient,
}

// ParseRoles reads roles written comma-separated (client,worker,subscriber).
func ParseRoles(s string) (Roles, error) {
	var roles Roles
	for r := range strings.SplitSeq(s, ",") {
		r = strings.TrimSpace(r)
		role, ok := roleNames[r]
		if !ok {
			return 0, fmt.Errorf("role %q: want client, worker or subscriber", r)
		}
		roles |= role
	}
	return roles, nil
}

// credentials are the peers the files allow.
type credentials struct {
	keys  map[string]Roles // CURVE public key (Z85) -> roles
	users map[string]user  // PLAIN user -> its hash and roles
	// dummy is compared against when a PLAIN user is unknown, at the
	// highest cost of the file's hashes, so that a refusal takes as long
	// whether or not the user exists.
	dummy []byte
}

type user struct {
	hash  []byte
	roles Roles
}

// loadCredentials reads o's CurveClients and PlainUsers files.
func loadCredentials(o *Options) (*credentials, error) {
	c := &credentials{keys: map[string]Roles{}, users: map[string]user{}}
	if o.CurveClients != "" {
		err := eachLine(o.CurveClients, func(line string) error {
			fields := strings.Fields(line)
			if len(fields) != 2 {
				return errors.New("want a public key (Z85) and its roles")
			}
			key, err := zmtp.ParseKey(fields[0])
			if err != nil {
				return err
			}
			roles, err := ParseRoles(fields[1])
			c.keys[key.String()] = roles
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("curve-clients: %w", err)
		}
	}
	if o.PlainUsers != "" {
		maxCost := bcrypt.MinCost
		err := eachLine(o.PlainUsers, func(line string) error {
			name, rest, ok1 := strings.Cut(line, ":")
			hash, roleList, ok2 := strings.Cut(rest, ":")
			if !ok1 || !ok2 || name == "" {
				return errors.New("want USER:BCRYPT-HASH:ROLES (emq passwd writes it)")
			}
			cost, err := bcrypt.Cost([]byte(hash))
			if err != nil {
				return fmt.Errorf("user %s: not a bcrypt hash: %w", name, err)
			}
			maxCost = max(maxCost, cost)
			roles, err := ParseRoles(roleList)
			c.users[name] = user{[]byte(hash), roles}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("plain-users: %w", err)
		}
		if c.dummy, err = bcrypt.GenerateFromPassword([]byte("no such user"), maxCost); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// eachLine calls fn with each line of path that is not blank or a
// comment (from a # at the start or after a space: Z85 keys hold #); an
// error names the file and line.
func eachLine(path string, fn func(string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := uncomment(sc.Text())
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s line %d: %w", path, n, err)
		}
	}
	return sc.Err()
}

// uncomment cuts line at a # that starts it or follows a space.
func uncomment(line string) string {
	for i := range len(line) {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

// ReloadCredentials re-reads CurveClients and PlainUsers and closes the
// connections of the peers they no longer allow as they were; on an
// error the peers allowed stay as they were.
func (b *Broker) ReloadCredentials() error {
	c, err := loadCredentials(&b.opts)
	if err != nil {
		return err
	}
	b.creds.Store(c)
	// Connections of peers no longer listed, listed with other roles, or
	// with another password, end now: a revoked key does not keep
	// working until it reconnects.
	keep := func(a *zmtp.Auth) bool {
		switch a.Mechanism {
		case zmtp.Curve:
			roles, ok := c.keys[a.Name]
			return ok && uint32(roles) == a.Roles
		case zmtp.Plain: // a new password ends the old one's connections too
			u, ok := c.users[a.Name]
			return ok && uint32(u.roles) == a.Roles && string(u.hash) == a.Proof
		}
		return false
	}
	select {
	case <-b.ready: // the endpoints are bound
	default:
		b.log.Info("credentials re-read", "curve_clients", len(c.keys), "plain_users", len(c.users))
		return nil
	}
	closed := 0
	for _, r := range b.routers {
		if r != nil {
			closed += r.Revoke(keep)
		}
	}
	if r := b.pubIn.Load(); r != nil {
		closed += r.Revoke(keep)
	}
	if p := b.pub.Load(); p != nil {
		closed += p.Revoke(keep)
	}
	b.log.Info("credentials re-read", "curve_clients", len(c.keys), "plain_users", len(c.users), "connections_closed", closed)
	return nil
}

// secured reports whether the eMQP endpoints want CURVE or PLAIN.
func (o *Options) secured() bool { return o.CurveSecretKeyFile != "" || o.PlainUsers != "" }

// serverSecurity is the mechanisms of an endpoint whose peers need the
// role need to be admitted (0 = any listed peer); nil = NULL.
func (b *Broker) serverSecurity(need Roles) *zmtp.ServerSecurity {
	if !b.opts.secured() {
		return nil
	}
	ss := &zmtp.ServerSecurity{Plain: b.opts.PlainUsers != "", Admit: func(a *zmtp.Auth, password string) error {
		if err := b.admit(a, password); err != nil {
			return err
		}
		if need != 0 && Roles(a.Roles)&need == 0 {
			return fmt.Errorf("%s may not use this endpoint (its roles: %s)", a.Name, Roles(a.Roles).String())
		}
		return nil
	}}
	if b.opts.CurveSecretKeyFile != "" {
		ss.Curve = &b.curveSecret
	}
	return ss
}

// bcryptSlots bounds the password checks running at once to half the
// CPUs (at least one): a flood of PLAIN handshakes, which anyone can
// send, leaves the other half to the jobs.
var bcryptSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))

// admit decides a peer by the credentials and sets its roles.
func (b *Broker) admit(a *zmtp.Auth, password string) error {
	c := b.creds.Load()
	switch a.Mechanism {
	case zmtp.Curve:
		roles, ok := c.keys[a.Name]
		if !ok {
			return errors.New("client key not listed in curve-clients")
		}
		a.Roles = uint32(roles)
		return nil
	case zmtp.Plain:
		from := guessKey(a.Remote)
		if !b.guesses.attempt(from, time.Now()) {
			return fmt.Errorf("%d wrong passwords from %s within %v: wait", MaxGuesses, from, GuessWindow)
		}
		u, right := c.users[a.Name], c.checkPassword(a.Name, password)
		if !right {
			return errors.New("wrong user or password")
		}
		b.guesses.takeBack(from)
		a.Roles, a.Proof = uint32(u.roles), string(u.hash)
		return nil
	}
	return fmt.Errorf("mechanism %s", a.Mechanism)
}

// checkPassword reports whether password is user's, taking as long for a
// user that does not exist.
func (c *credentials) checkPassword(name, password string) bool {
	if len(password) > 72 { // bcrypt reads no more: a longer one would pass as its first 72 bytes
		return false
	}
	u, ok := c.users[name]
	hash := u.hash
	if !ok {
		hash = c.dummy
	}
	bcryptSlots <- struct{}{} // a check costs ~50 ms of CPU: a flood of them waits its turn
	wrong := bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil
	<-bcryptSlots
	return ok && !wrong
}

// guesses slows the guessing of PLAIN passwords: each check counts
// against its address (an IPv6 /64 counts as one) before it runs, and a
// right password takes its count back; MaxGuesses within GuessWindow
// of an address's first, and its PLAIN handshakes are refused, without
// a check, until the window has passed. Counting before checking keeps
// concurrent handshakes from all slipping under the limit. It tracks at
// most 10,000 addresses.
type guesses struct {
	mu sync.Mutex
	m  map[string]guessCount
}

type guessCount struct {
	n     int
	first time.Time
}

// Limits of the guessing of PLAIN passwords.
const (
	MaxGuesses  = 10
	GuessWindow = time.Minute
	maxGuessers = 10000
)

// attempt counts a check from addr, or reports false when addr has had
// its MaxGuesses in this window.
func (g *guesses) attempt(addr string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]guessCount{}
	}
	c, ok := g.m[addr]
	if !ok || now.Sub(c.first) >= GuessWindow {
		if !ok && len(g.m) >= maxGuessers { // the stale go first, then any: the map stays bounded
			for k, v := range g.m {
				if now.Sub(v.first) >= GuessWindow {
					delete(g.m, k)
				}
			}
			for k := range g.m {
				if len(g.m) < maxGuessers {
					break
				}
				delete(g.m, k)
			}
		}
		c = guessCount{first: now}
	}
	if c.n >= MaxGuesses {
		return false
	}
	c.n++
	g.m[addr] = c
	return true
}

// takeBack uncounts a check of addr that found the right password.
func (g *guesses) takeBack(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.m[addr]; ok && c.n > 0 {
		c.n--
		g.m[addr] = c
	}
}

// guessKey is what guesses counts an address by: an IPv4 address, or an
// IPv6 address's /64 (one host's share of a network).
func guessKey(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		if a == nil {
			return ""
		}
		return a.String()
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return tcp.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// String writes roles as ParseRoles reads them.
func (roles Roles) String() string {
	var names []string
	for _, n := range []string{"client", "worker", "subscriber"} {
		if roles&roleNames[n] != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// checkRoles answers a message its sender's roles do not allow with
// ERROR forbidden (zmtp.Options.Check); it runs on the connection's
// reader, before the loop sees the message. Without CURVE or PLAIN it is
// nil: nothing to check.
func (b *Broker) checkRoles(ep int) func(id string, a *zmtp.Auth, frames [][]byte) [][]byte {
	if !b.opts.secured() {
		return nil // every peer has every role: nothing to check
	}
	return func(id string, a *zmtp.Auth, frames [][]byte) [][]byte {
		if a == nil || len(frames) < 3 {
			return nil
		}
		cmd := string(frames[2])
		need := commandRole[cmd]
		if need == 0 || Roles(a.Roles)&need != 0 {
			return nil
		}
		var ref string
		if len(frames) > 3 && len(frames[3]) <= 64 {
			ref = string(frames[3])
		}
		b.stats.countError(emqp.CodeForbidden)
		b.forbidLog.Warn(b.log, "forbidden", "peer", peerName(peerKey{ep, id}), "who", a.Name, "command", cmd, "roles", Roles(a.Roles).String())
		return emqp.Encode(&emqp.Error{MsgID: emqp.NewID(), RefMsgID: ref, Code: emqp.CodeForbidden,
			Text: fmt.Sprintf("%s may not send %s (its roles: %s)", a.Name, cmd, Roles(a.Roles).String())})
	}
}
