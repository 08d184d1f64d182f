package zmtp

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"
)

// ZMTP 3.0's PLAIN (RFC 24) and CURVE (RFC 25 and 26) mechanisms, ours:
// zmq4 has no CURVE, and its PLAIN accepts any password. NULL stays with
// zmq4's handshake (open). A connection with a mechanism is opened by
// secureOpen: the greeting, the mechanism's commands, then, for CURVE,
// every frame travels boxed in a MESSAGE (curveCodec).

// Mechanisms of ours (NULL is zmq4's handshake).
const (
	Plain = "PLAIN"
	Curve = "CURVE"
)

// Auth is what a peer proved in its handshake.
type Auth struct {
	Mechanism string   // PLAIN or CURVE
	Name      string   // PLAIN: the user; CURVE: the client's public key (Z85)
	Roles     uint32   // what ServerSecurity.Admit gave it
	Proof     string   // what Admit checked it against (PLAIN: the user's hash), to see it change
	Remote    net.Addr // where the handshake came from
}

// ServerSecurity is a Router's mechanisms (nil = NULL: anyone): CURVE
// with a secret key, PLAIN, or both, as each peer asks.
type ServerSecurity struct {
	Curve *Key // CURVE with this secret key; nil = no CURVE
	Plain bool // PLAIN
	// Admit decides a peer once its handshake has shown who it is (a
	// CURVE client's public key, or a PLAIN user and its password): it
	// sets a.Roles, or returns why the peer is refused.
	Admit func(a *Auth, password string) error
}

// ClientSecurity is a Dial's mechanism (nil = NULL).
type ClientSecurity struct {
	Mechanism      string // Plain or Curve
	ServerKey      Key    // CURVE: the server's public key
	Public, Secret Key    // CURVE: this client's key pair
	User, Password string // PLAIN
}

// ErrRefused is a handshake the server refused (ERROR command).
var ErrRefused = errors.New("zmtp: the peer refused the handshake")

// handshakeMax bounds a handshake command's body.
const handshakeMax = 64 << 10

// hs is a handshake in progress.
type hs struct {
	nc net.Conn
	r  *bufio.Reader
}

func (h *hs) writeCommand(name string, data ...[]byte) error {
	body := append([]byte{byte(len(name))}, name...)
	for _, d := range data {
		body = append(body, d...)
	}
	var frame []byte
	if len(body) > 255 {
		frame = binary.BigEndian.AppendUint64([]byte{flagCommand | flagLong}, uint64(len(body)))
	} else {
		frame = []byte{flagCommand, byte(len(body))}
	}
	_, err := h.nc.Write(append(frame, body...))
	return err
}

// readCommand reads a command frame, which must be called name (an ERROR
// from the peer is ErrRefused with its reason).
func (h *hs) readCommand(name string) ([]byte, error) {
	flags, err := h.r.ReadByte()
	if err != nil {
		return nil, err
	}
	var size uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(h.r, b[:]); err != nil {
			return nil, err
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := h.r.ReadByte()
		if err != nil {
			return nil, err
		}
		size = uint64(b)
	}
	if flags&flagCommand == 0 || flags&flagMore != 0 || size == 0 || size > handshakeMax {
		return nil, fmt.Errorf("zmtp: want the %s command, got a frame of %d bytes with flags %#x", name, size, flags)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(h.r, body); err != nil {
		return nil, err
	}
	n := int(body[0])
	if n > len(body)-1 {
		return nil, errors.New("zmtp: malformed command")
	}
	got, data := string(body[1:1+n]), body[1+n:]
	if got == "ERROR" && name != "ERROR" {
		reason := ""
		if len(data) > 0 && int(data[0]) <= len(data)-1 {
			reason = string(data[1 : 1+int(data[0])])
		}
		return nil, fmt.Errorf("%w: %s", ErrRefused, reason)
	}
	if got != name {
		return nil, fmt.Errorf("zmtp: want the %s command, got %q", name, got)
	}
	return data, nil
}

// refuse sends an ERROR command with reason; the caller closes.
func (h *hs) refuse(reason string) {
	reason = reason[:min(len(reason), 255)]
	_ = h.writeCommand("ERROR", []byte{byte(len(reason))}, []byte(reason))
}

// greet exchanges ZMTP 3.0 greetings announcing mechanism (a client).
func (h *hs) greet(mechanism string) error {
	g := greeting(mechanism, false)
	if _, err := h.nc.Write(g[:]); err != nil {
		return err
	}
	got, err := h.readGreeting()
	if err != nil {
		return err
	}
	if got != mechanism {
		return fmt.Errorf("zmtp: the peer's mechanism is %s, this endpoint's %s", printable(got), mechanism)
	}
	return nil
}

// greetServer exchanges greetings as a server that offers mechanisms:
// the signature and major version first (a libzmq peer sends the rest of
// its greeting only then), the peer's whole greeting, then the rest of
// ours with the mechanism the peer asked for.
func (h *hs) greetServer(offered ...string) (string, error) {
	g := greeting("", true)
	if _, err := h.nc.Write(g[:11]); err != nil {
		return "", err
	}
	got, err := h.readGreeting()
	if err != nil {
		return "", err
	}
	if !slices.Contains(offered, got) {
		return "", fmt.Errorf("zmtp: the peer's mechanism is %s, this endpoint's %s", printable(got), strings.Join(offered, " or "))
	}
	g = greeting(got, true)
	_, err = h.nc.Write(g[11:])
	return got, err
}

func greeting(mechanism string, server bool) [greetingLen]byte {
	var g [greetingLen]byte
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:32], mechanism)
	if server {
		g[32] = 1
	}
	return g
}

// readGreeting reads the peer's greeting and returns its mechanism.
func (h *hs) readGreeting() (string, error) {
	var g [greetingLen]byte
	if _, err := io.ReadFull(h.r, g[:]); err != nil {
		return "", fmt.Errorf("zmtp: greeting: %w", err)
	}
	if g[0] != 0xff || g[9] != 0x7f || g[10] < 3 {
		return "", errors.New("zmtp: not a ZMTP 3 greeting")
	}
	return string(bytes.TrimRight(g[12:32], "\x00")), nil
}

func printable(s string) string {
	if s == "" {
		return `""`
	}
	return fmt.Sprintf("%q", s)
}

// appendMeta adds a metadata property.
func appendMeta(b []byte, name, value string) []byte {
	b = append(append(b, byte(len(name))), name...)
	return append(binary.BigEndian.AppendUint32(b, uint32(len(value))), value...)
}

// parseMeta reads metadata properties.
func parseMeta(b []byte) (map[string]string, error) {
	m := map[string]string{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return nil, errors.New("zmtp: truncated metadata")
		}
		name := string(b[1 : 1+n])
		size := binary.BigEndian.Uint32(b[1+n:])
		b = b[1+n+4:]
		if uint64(size) > uint64(len(b)) {
			return nil, errors.New("zmtp: truncated metadata value")
		}
		m[name], b = string(b[:size]), b[size:]
	}
	return m, nil
}

func metadata(typ string, id []byte) []byte {
	b := appendMeta(nil, "Socket-Type", typ)
	if typ == "DEALER" || typ == "ROUTER" {
		b = appendMeta(b, "Identity", string(id))
	}
	return b
}

// secureOpen runs a PLAIN or CURVE handshake over nc within timeout: as
// the server with ss, as the client with cs.
func secureOpen(nc net.Conn, typ string, id []byte, ss *ServerSecurity, cs *ClientSecurity, max uint64, timeout time.Duration, rbuf int) (*Conn, error) {
	if timeout > 0 {
		_ = nc.SetDeadline(time.Now().Add(timeout))
	}
	h := &hs{nc: nc, r: bufio.NewReaderSize(nc, rbuf)}
	c := &Conn{nc: nc, r: h.r, max: max, done: make(chan struct{})}
	var peer map[string]string
	var err error
	var mechanism string
	if ss != nil {
		var offered []string
		if ss.Curve != nil {
			offered = append(offered, Curve)
		}
		if ss.Plain {
			offered = append(offered, Plain)
		}
		mechanism, err = h.greetServer(offered...)
		if err != nil {
			return nil, fmt.Errorf("zmtp: handshake with %s: %w", nc.RemoteAddr(), err)
		}
	}
	switch {
	case mechanism == Curve:
		peer, err = h.curveServer(c, ss, metadata(typ, id))
	case mechanism == Plain:
		peer, err = h.plainServer(c, ss, metadata(typ, id))
	case cs != nil && cs.Mechanism == Curve:
		peer, err = h.curveClient(c, cs, metadata(typ, id))
	case cs != nil && cs.Mechanism == Plain:
		peer, err = h.plainClient(cs, metadata(typ, id))
	default:
		err = errors.New("zmtp: no mechanism")
	}
	if err != nil {
		return nil, fmt.Errorf("zmtp: handshake with %s: %w", nc.RemoteAddr(), err)
	}
	if ok, known := compatible[typ]; known && !slices.Contains(ok, peer["Socket-Type"]) {
		return nil, fmt.Errorf("zmtp: handshake with %s: a %s cannot talk to a %s", nc.RemoteAddr(), printable(peer["Socket-Type"]), typ)
	}
	_ = nc.SetDeadline(time.Time{})
	c.Identity, c.SocketType = []byte(peer["Identity"]), peer["Socket-Type"]
	if c.curve != nil {
		c.max += uint64(curveOverhead)
	}
	return c, nil
}

func (h *hs) plainServer(c *Conn, ss *ServerSecurity, meta []byte) (map[string]string, error) {
	data, err := h.readCommand("HELLO")
	if err != nil {
		return nil, err
	}
	if len(data) < 1 {
		return nil, errors.New("zmtp: malformed PLAIN HELLO")
	}
	n := int(data[0]) // as ints: 1+255 must not wrap
	if len(data) < 1+n+1 || len(data) != 1+n+1+int(data[1+n]) {
		return nil, errors.New("zmtp: malformed PLAIN HELLO")
	}
	user, password := string(data[1:1+n]), string(data[2+n:])
	c.Auth = &Auth{Mechanism: Plain, Name: user, Remote: h.nc.RemoteAddr()}
	if err := ss.Admit(c.Auth, password); err != nil {
		h.refuse(err.Error())
		return nil, fmt.Errorf("%w: user %q: %v", ErrRefused, user, err)
	}
	if err := h.writeCommand("WELCOME"); err != nil {
		return nil, err
	}
	data, err = h.readCommand("INITIATE")
	if err != nil {
		return nil, err
	}
	peer, err := parseMeta(data)
	if err != nil {
		return nil, err
	}
	return peer, h.writeCommand("READY", meta)
}

func (h *hs) plainClient(cs *ClientSecurity, meta []byte) (map[string]string, error) {
	if len(cs.User) > 255 || len(cs.Password) > 255 {
		return nil, errors.New("zmtp: a PLAIN user or password is at most 255 bytes")
	}
	if err := h.greet(Plain); err != nil {
		return nil, err
	}
	hello := append(append([]byte{byte(len(cs.User))}, cs.User...), byte(len(cs.Password)))
	if err := h.writeCommand("HELLO", hello, []byte(cs.Password)); err != nil {
		return nil, err
	}
	if _, err := h.readCommand("WELCOME"); err != nil {
		return nil, err
	}
	if err := h.writeCommand("INITIATE", meta); err != nil {
		return nil, err
	}
	data, err := h.readCommand("READY")
	if err != nil {
		return nil, err
	}
	return parseMeta(data)
}

// fullOrder refuses a peer's public key of low order, whose shared secret
// with any secret is all zeros (libsodium refuses them; x/crypto's box
// does not check).
func fullOrder(peer, secret Key) error {
	if _, err := curve25519.X25519(secret[:], peer[:]); err != nil {
		return errors.New("zmtp: CURVE: a low-order public key")
	}
	return nil
}

// compatible are the socket types each may talk to (RFC 23).
var compatible = map[string][]string{
	"ROUTER": {"DEALER", "REQ", "ROUTER"},
	"DEALER": {"ROUTER", "REP", "DEALER"},
	"PUB":    {"SUB", "XSUB"},
	"SUB":    {"PUB", "XPUB"},
}

// CURVE's nonce prefixes (RFC 26).
const (
	nonceHello    = "CurveZMQHELLO---"
	nonceWelcome  = "WELCOME-"
	nonceCookie   = "COOKIE--"
	nonceInitiate = "CurveZMQINITIATE"
	nonceVouch    = "VOUCH---"
	nonceReady    = "CurveZMQREADY---"
	nonceToServer = "CurveZMQMESSAGEC"
	nonceToClient = "CurveZMQMESSAGES"
)

func shortNonce(prefix string, n uint64) *[24]byte {
	var nonce [24]byte
	copy(nonce[:], prefix)
	binary.BigEndian.PutUint64(nonce[16:], n)
	return &nonce
}

func longNonce(prefix string, random []byte) *[24]byte {
	var nonce [24]byte
	copy(nonce[:], prefix)
	copy(nonce[8:], random)
	return &nonce
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// Sizes of the CURVE commands' parts.
const (
	helloLen    = 2 + 72 + 32 + 8 + 80 // version, padding, C', nonce, box of 64 zeros
	cookieLen   = 16 + 80              // nonce, box of C' and s'
	welcomeLen  = 16 + 16 + 32 + cookieLen
	vouchLen    = 16 + 80
	initiateMin = cookieLen + 8 + 16 + 32 + vouchLen
)

func (h *hs) curveServer(c *Conn, ss *ServerSecurity, meta []byte) (map[string]string, error) {
	data, err := h.readCommand("HELLO")
	if err != nil {
		return nil, err
	}
	if len(data) != helloLen || data[0] != 1 {
		return nil, fmt.Errorf("zmtp: malformed CURVE HELLO (%d bytes)", len(data))
	}
	var clientT Key // C'
	copy(clientT[:], data[74:106])
	if err := fullOrder(clientT, *ss.Curve); err != nil {
		return nil, err
	}
	helloNonce := binary.BigEndian.Uint64(data[106:114])
	zeros, ok := box.Open(nil, data[114:], shortNonce(nonceHello, helloNonce), (*[32]byte)(&clientT), (*[32]byte)(ss.Curve))
	if !ok || !bytes.Equal(zeros, make([]byte, 64)) {
		return nil, errors.New("zmtp: CURVE HELLO does not open with this server's key (the client has another server key)")
	}
	serverTPub, serverTSec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	// The cookie: C' and s' under a key only this handshake knows.
	var cookieKey [32]byte
	copy(cookieKey[:], random(32))
	cn := random(16)
	cookie := append(cn, secretbox.Seal(nil, append(clientT[:], serverTSec[:]...), longNonce(nonceCookie, cn), &cookieKey)...)
	wn := random(16)
	welcome := box.Seal(nil, append(serverTPub[:], cookie...), longNonce(nonceWelcome, wn), (*[32]byte)(&clientT), (*[32]byte)(ss.Curve))
	if err := h.writeCommand("WELCOME", wn, welcome); err != nil {
		return nil, err
	}

	data, err = h.readCommand("INITIATE")
	if err != nil {
		return nil, err
	}
	if len(data) < initiateMin {
		return nil, fmt.Errorf("zmtp: malformed CURVE INITIATE (%d bytes)", len(data))
	}
	kept, ok := secretbox.Open(nil, data[16:cookieLen], longNonce(nonceCookie, data[:16]), &cookieKey)
	if !ok || !bytes.Equal(kept[:32], clientT[:]) {
		return nil, errors.New("zmtp: CURVE INITIATE carries a cookie this server did not give")
	}
	initNonce := binary.BigEndian.Uint64(data[cookieLen : cookieLen+8])
	plain, ok := box.Open(nil, data[cookieLen+8:], shortNonce(nonceInitiate, initNonce), (*[32]byte)(&clientT), serverTSec)
	if !ok || len(plain) < 32+vouchLen {
		return nil, errors.New("zmtp: CURVE INITIATE does not open")
	}
	var client Key // C
	copy(client[:], plain[:32])
	if err := fullOrder(client, *serverTSec); err != nil {
		return nil, err
	}
	vouch := plain[32 : 32+vouchLen]
	vouched, ok := box.Open(nil, vouch[16:], longNonce(nonceVouch, vouch[:16]), (*[32]byte)(&client), serverTSec)
	serverPub := PublicKey(*ss.Curve)
	if !ok || len(vouched) != 64 || !bytes.Equal(vouched[:32], clientT[:]) || !bytes.Equal(vouched[32:], serverPub[:]) {
		return nil, errors.New("zmtp: CURVE INITIATE's vouch does not hold")
	}
	peer, err := parseMeta(plain[32+vouchLen:])
	if err != nil {
		return nil, err
	}
	c.Auth = &Auth{Mechanism: Curve, Name: client.String(), Remote: h.nc.RemoteAddr()}
	if err := ss.Admit(c.Auth, ""); err != nil {
		h.refuse(err.Error())
		return nil, fmt.Errorf("%w: client key %s: %v", ErrRefused, client, err)
	}
	cc := &curveCodec{sendPrefix: nonceToClient, recvPrefix: nonceToServer, sendNonce: 1, recvNonce: initNonce}
	box.Precompute(&cc.shared, (*[32]byte)(&clientT), serverTSec)
	ready := box.SealAfterPrecomputation(nil, meta, shortNonce(nonceReady, cc.sendNonce), &cc.shared)
	if err := h.writeCommand("READY", binary.BigEndian.AppendUint64(nil, cc.sendNonce), ready); err != nil {
		return nil, err
	}
	cc.sendNonce++
	c.curve = cc
	return peer, nil
}

func (h *hs) curveClient(c *Conn, cs *ClientSecurity, meta []byte) (map[string]string, error) {
	if err := h.greet(Curve); err != nil {
		return nil, err
	}
	clientTPub, clientTSec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	var nonce uint64 = 1
	hello := make([]byte, 0, helloLen)
	hello = append(hello, 1, 0)
	hello = append(hello, make([]byte, 72)...)
	hello = append(hello, clientTPub[:]...)
	hello = binary.BigEndian.AppendUint64(hello, nonce)
	hello = box.Seal(hello, make([]byte, 64), shortNonce(nonceHello, nonce), (*[32]byte)(&cs.ServerKey), clientTSec)
	if err := h.writeCommand("HELLO", hello); err != nil {
		return nil, err
	}
	data, err := h.readCommand("WELCOME")
	if err != nil {
		return nil, err
	}
	if len(data) != welcomeLen {
		return nil, fmt.Errorf("zmtp: malformed CURVE WELCOME (%d bytes)", len(data))
	}
	plain, ok := box.Open(nil, data[16:], longNonce(nonceWelcome, data[:16]), (*[32]byte)(&cs.ServerKey), clientTSec)
	if !ok {
		return nil, errors.New("zmtp: CURVE WELCOME does not open: the server's key is not the one configured")
	}
	var serverT [32]byte // S'
	copy(serverT[:], plain[:32])
	if err := fullOrder(serverT, *clientTSec); err != nil {
		return nil, err
	}
	cookie := plain[32:]

	vn := random(16)
	vouch := append(vn, box.Seal(nil, append(clientTPub[:], cs.ServerKey[:]...), longNonce(nonceVouch, vn), &serverT, (*[32]byte)(&cs.Secret))...)
	nonce++
	initiate := append(append([]byte{}, cookie...), binary.BigEndian.AppendUint64(nil, nonce)...)
	initiate = box.Seal(initiate, append(append(append([]byte{}, cs.Public[:]...), vouch...), meta...),
		shortNonce(nonceInitiate, nonce), &serverT, clientTSec)
	if err := h.writeCommand("INITIATE", initiate); err != nil {
		return nil, err
	}
	data, err = h.readCommand("READY")
	if err != nil {
		return nil, err
	}
	if len(data) < 8+16 {
		return nil, errors.New("zmtp: malformed CURVE READY")
	}
	cc := &curveCodec{sendPrefix: nonceToServer, recvPrefix: nonceToClient, sendNonce: nonce + 1}
	box.Precompute(&cc.shared, &serverT, clientTSec)
	cc.recvNonce = binary.BigEndian.Uint64(data[:8])
	meta, ok = box.OpenAfterPrecomputation(nil, data[8:], shortNonce(nonceReady, cc.recvNonce), &cc.shared)
	if !ok {
		return nil, errors.New("zmtp: CURVE READY does not open")
	}
	c.curve = cc
	return parseMeta(meta)
}

// curveCodec boxes and unboxes a CURVE connection's frames, each in a
// MESSAGE: "\x07MESSAGE", an 8-byte nonce, then the box of a flags byte
// (1 more, 2 command) and the frame's body. Nonces only go up: a frame
// replayed or reordered does not open.
type curveCodec struct {
	shared                 [32]byte
	sendPrefix, recvPrefix string
	sendNonce              uint64 // the next to use; under Conn.wmu
	scratch                []byte // a frame's flags and body, to box; under Conn.wmu
	recvNonce              uint64 // the last seen; the reader's
}

const (
	messageName     = "\x07MESSAGE"
	curveOverhead   = len(messageName) + 8 + box.Overhead + 1
	curveFlagMore   = 0x01
	curveFlagComand = 0x02
)

// seal appends to b the MESSAGE frame (header and body) of one frame.
func (cc *curveCodec) seal(b []byte, flags byte, body []byte) []byte {
	b = appendHeader(b, 0, curveOverhead+len(body))
	b = append(b, messageName...)
	b = binary.BigEndian.AppendUint64(b, cc.sendNonce)
	plain := append(append(cc.scratch[:0], flags), body...)
	if cap(plain) <= 64<<10 {
		cc.scratch = plain // small frames reuse it
	}
	b = box.SealAfterPrecomputation(b, plain, shortNonce(cc.sendPrefix, cc.sendNonce), &cc.shared)
	cc.sendNonce++
	return b
}

// open unboxes a MESSAGE's body into the frame's flags (as ZMTP's) and
// body, carved from out.
func (cc *curveCodec) open(msg []byte, out []byte) (byte, []byte, error) {
	if len(msg) < curveOverhead || string(msg[:len(messageName)]) != messageName {
		return 0, nil, errors.New("zmtp: CURVE: a frame that is not a MESSAGE")
	}
	n := binary.BigEndian.Uint64(msg[len(messageName):])
	if n <= cc.recvNonce {
		return 0, nil, errors.New("zmtp: CURVE: a MESSAGE's nonce does not go up (replayed?)")
	}
	plain, ok := box.OpenAfterPrecomputation(out[:0], msg[len(messageName)+8:], shortNonce(cc.recvPrefix, n), &cc.shared)
	if !ok {
		return 0, nil, errors.New("zmtp: CURVE: a MESSAGE does not open")
	}
	cc.recvNonce = n
	var flags byte
	if plain[0]&curveFlagMore != 0 {
		flags |= flagMore
	}
	if plain[0]&curveFlagComand != 0 {
		flags |= flagCommand
	}
	return flags, plain[1:], nil
}
