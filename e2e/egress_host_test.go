//go:build e2e

package e2e

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// hostAddress gives this machine a new address in TEST-NET-3 (outside
// every range a policy guards), on its loopback interface (the test
// removes it; the kernel delivers to a local address whatever interface
// holds it), with a TCP server on it that says hello, and returns the
// address and port.
func hostAddress(t *testing.T) (string, int) {
	t.Helper()
	n, _ := rand.Int(rand.Reader, big.NewInt(250))
	addr := fmt.Sprintf("203.0.113.%d", n.Int64()+2)
	if out, err := exec.Command("ip", "addr", "add", addr+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s: %v\n%s", addr, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", addr+"/32", "dev", "lo").Run() })
	ln, err := net.Listen("tcp4", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()
	return addr, ln.Addr().(*net.TCPAddr).Port
}

// TestSecurityEgressHostAddresses: a policed sandbox cannot reach the
// host's own addresses (beyond its gateway), under defaultAction allow nor
// through an allowed name that resolves to one, including an address the
// host got after the sandbox was made. An unpoliced sandbox on the same
// network reaches it (the control).
func TestSecurityEgressHostAddresses(t *testing.T) {
	// The world's resolver answers host.test with the address the host
	// gets below (the zone is fixed when the resolver starts).
	w := &egressWorld{allowedName: "allowed.test", deniedName: "denied.test"}
	var prefix string
	w.net = worldNetwork(t, func() string {
		n, _ := rand.Int(rand.Reader, big.NewInt(510))
		prefix = fmt.Sprintf("198.%d.%d.", 18+n.Int64()/255, n.Int64()%255)
		return prefix + "0/24"
	})
	w.dns = prefix + "10"
	s := startServer(t, withTOML(fmt.Sprintf("[docker]\nnetwork_mode = %q\n[egress]\ndns_upstream = [%q]\n", w.net, w.dns)))
	removeInstanceHelpersAtEnd(t, s)
	open := policedBox(t, s, map[string]any{"defaultAction": "allow"})
	control := newExecdBox(t, s, busyboxRequest())

	// The host gets a new address after the sandboxes were made.
	addr, port := hostAddress(t)
	worldServers(t, w.net, "host.test="+addr, w.dns)
	named := policedBox(t, s, map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "host.test"}}})
	dial := fmt.Sprintf("nc -w 3 %s %d </dev/null 2>&1", addr, port)
	waitUntil(t, 30*time.Second, "the control sandbox to reach the host's new address", func() bool {
		out, _ := control.secShell(t, dial)
		return strings.Contains(out, "hello from the host")
	})
	// Sandboxd reads the host's addresses at each sweep (1 s here).
	time.Sleep(3 * time.Second)
	if out, _ := open.secShell(t, dial); strings.Contains(out, "hello from the host") {
		t.Errorf("a sandbox under defaultAction allow reached the host at %s: %q", addr, out)
	}
	if out := lookup(t, named, "host.test", ""); !strings.Contains(out, addr) {
		t.Fatalf("the allowed name does not resolve to %s: %q", addr, out)
	}
	if out, _ := named.secShell(t, fmt.Sprintf("nc -w 3 host.test %d </dev/null 2>&1", port)); strings.Contains(out, "hello from the host") {
		t.Errorf("a sandbox reached the host at %s through an allowed name: %q", addr, out)
	}
}
