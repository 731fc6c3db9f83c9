//go:build linux

package guard

import (
	"bytes"
	"crypto/tls"
	"net"
	"strings"
	"testing"
)

// clientHello returns the first bytes crypto/tls sends for serverName.
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		_ = tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	defer a.Close()
	defer b.Close()
	head, _ := peekName(b, true)
	return head
}

func TestPeekSNI(t *testing.T) {
	hello := clientHello(t, "Denied.Example.com")
	if _, name := peekName(bytes.NewReader(hello), true); name != "Denied.Example.com" {
		t.Errorf("SNI = %q", name)
	}
	// Split across reads, as TCP may deliver it.
	r := &chunked{b: hello, n: 7}
	if head, name := peekName(r, true); name != "Denied.Example.com" || !bytes.Equal(head, hello) {
		t.Errorf("chunked SNI = %q (%d of %d bytes kept)", name, len(head), len(hello))
	}
	if _, name := peekName(bytes.NewReader(hello[:len(hello)-1]), true); name != "" {
		t.Errorf("truncated hello gave %q", name)
	}
	if _, name := peekName(strings.NewReader("SSH-2.0-x\r\n"), true); name != "" {
		t.Errorf("non-TLS gave %q", name)
	}
}

func TestPeekHost(t *testing.T) {
	for req, want := range map[string]string{
		"GET / HTTP/1.1\r\nUser-Agent: x\r\nhost: denied.test:8080\r\n\r\n": "denied.test",
		"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n":                  "2001:db8::1",
		"GET / HTTP/1.0\r\n\r\n":                                            "",
		"GET / HTTP/1.1\r\nHost: a.test":                                    "", // the head never ends
	} {
		head, name := peekName(strings.NewReader(req), false)
		if name != want || string(head) != req {
			t.Errorf("peekName(%q) = %q, %q; want %q", req, head, name, want)
		}
	}
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, net.ErrClosed
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}
