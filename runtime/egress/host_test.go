package egress

import (
	"net/netip"
	"slices"
	"testing"
)

// A namespace's own addresses are its "/32 host LOCAL" leaves, whichever
// table lists them; networks, broadcasts and loopback are not.
func TestLocalAddrs(t *testing.T) {
	const trie = `Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.0.2.0/24 2 0 2
        |-- 192.0.2.0
           /24 link UNICAST
        |-- 192.0.2.2
           /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 172.17.0.1
        /32 host LOCAL
     |-- 192.0.2.2
        /32 host LOCAL
`
	want := []netip.Addr{netip.MustParseAddr("172.17.0.1"), netip.MustParseAddr("192.0.2.2")}
	if got := LocalAddrs([]byte(trie)); !slices.Equal(got, want) {
		t.Errorf("LocalAddrs = %v, want %v", got, want)
	}
	if got := LocalAddrs(nil); len(got) != 0 {
		t.Errorf("LocalAddrs(nil) = %v", got)
	}
}
