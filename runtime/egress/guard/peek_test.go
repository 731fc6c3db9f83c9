//go:build linux

package guard

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
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
	head, _, _ := peekName(b, true)
	return head
}

// resplit puts the handshake of the single record hello into records of
// at most n bytes each.
func resplit(hello []byte, n int) []byte {
	msg := hello[5:]
	var out []byte
	for len(msg) > 0 {
		k := min(n, len(msg))
		out = append(out, 0x16, hello[1], hello[2], 0, 0)
		binary.BigEndian.PutUint16(out[len(out)-2:], uint16(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

func TestPeekSNI(t *testing.T) {
	hello := clientHello(t, "Denied.Example.com")
	if _, name, bad := peekName(bytes.NewReader(hello), true); name != "Denied.Example.com" || bad {
		t.Errorf("SNI = %q (bad %v)", name, bad)
	}
	// Split across reads, as TCP may deliver it.
	r := &chunked{b: hello, n: 7}
	if head, name, _ := peekName(r, true); name != "Denied.Example.com" || !bytes.Equal(head, hello) {
		t.Errorf("chunked SNI = %q (%d of %d bytes kept)", name, len(head), len(hello))
	}
	// Split across TLS records: the name is still read.
	for _, n := range []int{1, 40, 100} {
		split := resplit(hello, n)
		if head, name, bad := peekName(&chunked{b: split, n: 13}, true); name != "Denied.Example.com" || bad || !bytes.Equal(head, split) {
			t.Errorf("hello in records of %d bytes: SNI %q bad %v", n, name, bad)
		}
	}
	// Incomplete, malformed or oversize hellos are refused.
	for what, b := range map[string][]byte{
		"truncated":                hello[:len(hello)-1],
		"truncated over records":   resplit(hello, 50)[:len(resplit(hello, 50))-3],
		"first record only":        resplit(hello, 50)[:55],
		"another record type":      append(resplit(hello, 50)[:55], 0x17, 3, 3, 0, 1, 0),
		"not a client hello":       {0x16, 3, 1, 0, 4, 2, 0, 0, 0},
		"empty record":             {0x16, 3, 1, 0, 0},
		"oversize":                 resplit(append([]byte{0x16, 3, 1, 0, 0, 1, 0x10, 0, 0}, make([]byte, 1<<20)...), 1<<14),
		"hello too short to parse": {0x16, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3},
	} {
		if _, name, bad := peekName(bytes.NewReader(b), true); !bad || name != "" {
			t.Errorf("%s hello: name %q bad %v, want refused", what, name, bad)
		}
	}
	if _, name, bad := peekName(strings.NewReader("SSH-2.0-x\r\n"), true); name != "" || bad {
		t.Errorf("non-TLS gave %q (bad %v), want the address rules to decide", name, bad)
	}
}

func TestPeekHost(t *testing.T) {
	for req, want := range map[string]string{
		"GET / HTTP/1.1\r\nUser-Agent: x\r\nhost: denied.test:8080\r\n\r\n":    "denied.test",
		"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n":                     "2001:db8::1",
		"GET / HTTP/1.0\r\n\r\n":                                               "",
		"GET / HTTP/1.1\r\nHost: a.test":                                       "", // the head never ends
		"GET http://allowed.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n":     "allowed.test",
		"GET http://Allowed.Test:80/x HTTP/1.1\r\nHost: allowed.test.\r\n\r\n": "allowed.test.",
		"GET http://allowed.test/x HTTP/1.0\r\n\r\n":                           "allowed.test",
		"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n":  "allowed.test",
		"OPTIONS * HTTP/1.1\r\nHost: allowed.test\r\n\r\n":                     "allowed.test",
	} {
		head, name, bad := peekName(strings.NewReader(req), false)
		if name != want || bad || string(head) != req {
			t.Errorf("peekName(%q) = %q, %q, bad %v; want %q", req, head, name, bad, want)
		}
	}
	// A target naming another host than Host, or two Host headers, are
	// refused: the server may read the other one.
	for _, req := range []string{
		"GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"GET http://denied.test:80/ HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n",
		"CONNECT denied.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: denied.test\r\n\r\n",
		"GET http://%zz/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
	} {
		if _, name, bad := peekName(strings.NewReader(req), false); !bad {
			t.Errorf("peekName(%q) = %q, not refused", req, name)
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

// FuzzPeekName feeds the sandbox's first bytes, in chunks, to the name
// reader: it never panics, keeps exactly what it read (at most maxPeek),
// and a valid ClientHello split into records of any size still yields its
// name.
func FuzzPeekName(f *testing.F) {
	hello := clientHello(&testing.T{}, "fuzz.example.com")
	f.Add(hello, uint8(7), uint8(40))
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n"), uint8(3), uint8(1))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0}, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, chunk, split uint8) {
		for _, tls := range []bool{true, false} {
			head, name, bad := peekName(&chunked{b: b, n: int(chunk) + 1}, tls)
			if len(head) > maxPeek || !bytes.HasPrefix(b, head) || bad && name != "" {
				t.Fatalf("peekName(tls %v) = %d bytes, %q, bad %v", tls, len(head), name, bad)
			}
		}
		if _, name, bad := peekName(&chunked{b: resplit(hello, int(split)+1), n: int(chunk) + 1}, true); name != "fuzz.example.com" || bad {
			t.Fatalf("hello in records of %d bytes: %q bad %v", int(split)+1, name, bad)
		}
	})
}
