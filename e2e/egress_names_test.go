//go:build e2e

package e2e

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// splitHello puts the handshake of a one-record ClientHello into records
// of at most n bytes, as a client may legally send it.
func splitHello(hello []byte, n int) []byte {
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

// TestSecurityEgressNameTricks: ways of naming a denied host that the
// Host/SNI check must not miss, under defaultAction allow with the name
// denied, on an address that is open: a ClientHello split over several
// TLS records, and an absolute-form request line naming the denied host
// beside an innocent Host header. The same shapes for an unlisted name
// get through (so the refusals are about the names).
func TestSecurityEgressNameTricks(t *testing.T) {
	w := newEgressWorld(t)
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", w.net, w.dns)))
	removeInstanceHelpersAtEnd(t, s)
	open := policedBox(t, s, map[string]any{"defaultAction": "allow", "egress": []map[string]string{{"action": "deny", "target": w.deniedName}}})

	helloFor := func(name string, split int) bool {
		out, _ := open.secShell(t, "echo "+base64.StdEncoding.EncodeToString(splitHello(clientHello(t, name), split))+
			" | base64 -d >/tmp/hello && nc -w 5 "+w.denied+" 443 </tmp/hello | od -An -tx1 | head -1")
		return strings.HasPrefix(strings.TrimSpace(out), "16 03")
	}
	for _, split := range []int{40, 100} {
		if !helloFor("other.test", split) {
			t.Errorf("a ClientHello for an unlisted name in records of %d bytes is refused", split)
		}
		if helloFor(w.deniedName, split) {
			t.Errorf("a ClientHello naming the denied name in records of %d bytes got through", split)
		}
	}
	askFor := func(target, host string) bool {
		out, _ := open.secShell(t, `printf 'GET `+target+` HTTP/1.0\r\nHost: `+host+`\r\n\r\n' | nc -w 5 `+w.denied+` 80 2>&1`)
		return strings.Contains(out, "hello from")
	}
	if !askFor("http://other.test/", "other.test") {
		t.Errorf("an absolute-form request for an unlisted name is refused")
	}
	if askFor("http://"+w.deniedName+"/", "other.test") {
		t.Errorf("an absolute-form request naming the denied host beside another Host got through")
	}
}
