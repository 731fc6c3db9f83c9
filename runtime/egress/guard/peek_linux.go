package guard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProxyMark is the socket mark of the peeking proxy's onward connections:
// they skip the redirect but not the filter, so the address rules still
// decide them.
const ProxyMark = 0x5d2

// Ports the sandbox's outgoing TCP to 80 and 443 is redirected to: the
// peeking proxy, which reads the HTTP Host or the TLS SNI first.
const (
	httpProxyPort = 15080
	tlsProxyPort  = 15443
)

// maxPeek bounds what the proxy reads before deciding: a ClientHello
// over as many TLS records as it takes, or an HTTP request head. A
// ClientHello that does not fit is refused.
const maxPeek = 64 << 10

// peekTimeout bounds how long a client may take to send that.
const peekTimeout = 10 * time.Second

// listenPeek starts the proxy for one port kind on loopback.
func (d *daemon) listenPeek(port int, tls bool) (net.Listener, error) {
	ln, err := net.Listen("tcp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String())
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go d.relay(c.(*net.TCPConn), tls)
		}
	}()
	return ln, nil
}

// relay reads the name the client asks for, refuses it if the policy
// denies it, else connects to the original destination and splices.
func (d *daemon) relay(c *net.TCPConn, tls bool) {
	defer c.Close()
	dst, err := originalDst(c)
	if err != nil {
		d.log.Warn("egress: original destination", "err", err)
		return
	}
	if dst.Addr().IsLoopback() {
		return // reached directly, not redirected: nowhere to go
	}
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	head, name, bad := peekName(c, tls)
	_ = c.SetReadDeadline(time.Time{})
	if bad {
		// A name split, hidden or contradicted so that it may be read
		// otherwise than here: refused, not decided by address.
		d.log.Warn("egress: refused connection whose name cannot be read", "dst", dst)
		d.connDenied.Add(1)
		return
	}
	if name != "" {
		d.mu.Lock()
		allowed := d.policy.AllowsConnection(name, dst.Addr())
		d.mu.Unlock()
		if !allowed {
			d.log.Warn("egress: denied connection", "name", name, "dst", dst)
			d.connDenied.Add(1)
			return
		}
	}
	dialer := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return setMark(rc, ProxyMark)
	}}
	up, err := dialer.DialContext(context.Background(), "tcp", dst.String())
	if err != nil {
		return // the address rules dropped it, or nothing listens
	}
	d.connAllowed.Add(1)
	defer up.Close()
	if _, err := up.Write(head); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); c.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// originalDst is where the sandbox meant to connect before the redirect.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa *unix.IPv6Mreq // 20 bytes: room for a sockaddr_in
	var serr error
	err = rc.Control(func(fd uintptr) {
		sa, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, err
	}
	b := sa.Multiaddr
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), nil
}

// peekName reads the start of a connection and returns it with the name it
// asks for ("" when it names none: the address rules alone decide), or bad
// when the name cannot be read for sure: a ClientHello that is malformed,
// incomplete when the client stops sending or larger than maxPeek; an
// HTTP request whose target names another host than its Host header, or
// with several Host headers.
func peekName(r io.Reader, tls bool) (head []byte, name string, bad bool) {
	buf := make([]byte, 0, 4096)
	for len(buf) < maxPeek {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), maxPeek)])
		buf = buf[:len(buf)+n]
		var done bool
		if tls {
			name, done, bad = sniName(buf)
		} else {
			name, done, bad = hostName(buf)
		}
		if done {
			return buf, name, bad
		}
		if err != nil {
			break
		}
	}
	// The client stopped, or sent more than a name needs.
	return buf, "", tls
}

// hostName finds the host an HTTP request head asks for: its Host header,
// which must agree with an absolute-form target (GET http://host/...);
// CONNECT's authority. done once the head is complete (or cannot be
// HTTP).
func hostName(b []byte) (name string, done, bad bool) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return "", false, false
	}
	lines := strings.Split(string(b[:end]), "\r\n")
	var hosts []string
	for _, line := range lines[1:] {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			hosts = append(hosts, hostOnly(strings.TrimSpace(v)))
		}
	}
	if len(hosts) > 1 {
		return "", true, true
	}
	target := ""
	if f := strings.Fields(lines[0]); len(f) == 3 {
		switch {
		case strings.EqualFold(f[0], "CONNECT"):
			target = hostOnly(f[1])
		case !strings.HasPrefix(f[1], "/") && f[1] != "*":
			u, err := url.Parse(f[1])
			if err != nil || u.Host == "" {
				return "", true, true
			}
			target = hostOnly(u.Host)
		}
	}
	switch {
	case len(hosts) == 0:
		return target, true, false
	case target != "" && !strings.EqualFold(strings.TrimSuffix(target, "."), strings.TrimSuffix(hosts[0], ".")):
		return "", true, true
	}
	return hosts[0], true, false
}

// hostOnly drops the port and IPv6 brackets of an authority.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.Trim(h, "[]")
}

var errShort = errors.New("short")

// maxRecord is the largest TLS plaintext record.
const maxRecord = 16 << 10

// sniName finds the server_name of a TLS ClientHello, reassembled from as
// many handshake records as it spans. done once it is whole (or the
// connection cannot be TLS: the address rules decide); bad when it is
// malformed.
func sniName(b []byte) (name string, done, bad bool) {
	if len(b) > 0 && b[0] != 0x16 { // not a handshake record
		return "", true, false
	}
	var msg []byte
	for len(b) >= 5 {
		if b[0] != 0x16 { // another record before the hello is whole
			return "", true, true
		}
		n := int(binary.BigEndian.Uint16(b[3:5]))
		if n == 0 || n > maxRecord {
			return "", true, true
		}
		if len(b) < 5+n {
			return "", false, false
		}
		msg = append(msg, b[5:5+n]...)
		b = b[5+n:]
		if len(msg) < 4 {
			continue
		}
		if msg[0] != 1 { // not a client_hello
			return "", true, true
		}
		if size := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])); len(msg) >= size {
			name, err := parseClientHello(msg[:size])
			return name, true, err != nil
		}
	}
	return "", false, false
}

func parseClientHello(b []byte) (string, error) {
	p := parser(b)
	if t, ok := p.u8(); !ok || t != 1 { // client_hello
		return "", errShort
	}
	if !p.skip(3 + 2 + 32) { // length, version, random
		return "", errShort
	}
	for _, lenBytes := range []int{1, 2, 1} { // session id, cipher suites, compression
		if !p.skipVec(lenBytes) {
			return "", errShort
		}
	}
	ext, ok := p.vec(2)
	if !ok {
		return "", errShort
	}
	for len(ext) > 0 {
		typ, ok1 := ext.u16()
		body, ok2 := ext.vec(2)
		if !ok1 || !ok2 {
			return "", errShort
		}
		if typ != 0 { // server_name
			continue
		}
		list, ok := body.vec(2)
		for ok && len(list) > 0 {
			kind, ok1 := list.u8()
			name, ok2 := list.vec(2)
			if !ok1 || !ok2 {
				break
			}
			if kind == 0 {
				return string(name), nil
			}
		}
	}
	return "", nil
}

// parser reads TLS's length-prefixed fields.
type parser []byte

func (p *parser) u8() (byte, bool) {
	if len(*p) < 1 {
		return 0, false
	}
	v := (*p)[0]
	*p = (*p)[1:]
	return v, true
}

func (p *parser) u16() (uint16, bool) {
	if len(*p) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*p)
	*p = (*p)[2:]
	return v, true
}

func (p *parser) skip(n int) bool {
	if len(*p) < n {
		return false
	}
	*p = (*p)[n:]
	return true
}

// vec reads a field prefixed by its length in lenBytes (1 or 2) bytes.
func (p *parser) vec(lenBytes int) (parser, bool) {
	var n int
	if lenBytes == 1 {
		v, ok := p.u8()
		n = int(v)
		if !ok {
			return nil, false
		}
	} else {
		v, ok := p.u16()
		n = int(v)
		if !ok {
			return nil, false
		}
	}
	if len(*p) < n {
		return nil, false
	}
	v := (*p)[:n]
	*p = (*p)[n:]
	return v, true
}

func (p *parser) skipVec(lenBytes int) bool {
	_, ok := p.vec(lenBytes)
	return ok
}
