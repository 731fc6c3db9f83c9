package egress

import (
	"bufio"
	"errors"
	"io"
	"net/netip"
	"strings"
)

// ResolvConf is the resolver file the helper shares with its sandbox
// (Docker gives a container joining another's network that one's file).
// The daemon points it at itself and never reads it: the sandbox can write
// it.
const ResolvConf = "/etc/resolv.conf"

// Ready is the line `sandboxd egress guard` writes on its stdout once the
// default drop is in force in its namespace; sandboxd, on any OS, waits
// for it before it connects the sandbox.
const Ready = "sandboxd-egress: default drop in force"

// Nameservers returns the nameservers of a resolv.conf as ip:53, without
// loopback and unspecified ones (in a container, those are not the host's).
func Nameservers(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(fields[1])
		if err != nil || a.Unmap().IsLoopback() || a.IsUnspecified() {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap().WithZone(""), 53).String())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no nameserver")
	}
	return out, nil
}
