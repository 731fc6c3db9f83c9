package egress

import (
	"bufio"
	"bytes"
	"net/netip"
	"slices"
	"strings"
)

// Enforced is what sandboxd sends the daemon: the sandbox's policy and
// the host's own addresses, which stay closed to the sandbox under any
// policy (as its gateway does) unless an IP rule opens them.
type Enforced struct {
	Policy
	Host []netip.Addr `json:"host,omitempty"`
}

// LocalAddrs returns the IPv4 addresses a network namespace owns, from
// its /proc/<pid>/net/fib_trie (the "/32 host LOCAL" entries), sorted and
// without duplicates. Loopback is left out: in a sandbox's namespace it
// is the sandbox's own.
func LocalAddrs(fibTrie []byte) []netip.Addr {
	var out []netip.Addr
	var last netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(fibTrie))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if ip, ok := strings.CutPrefix(line, "|-- "); ok {
			last, _ = netip.ParseAddr(ip)
			continue
		}
		if line == "/32 host LOCAL" && last.Is4() && !last.IsLoopback() {
			out = append(out, last)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}
