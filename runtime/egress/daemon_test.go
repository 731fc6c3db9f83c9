//go:build linux

package egress

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestReadResolvConf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "# Docker\nsearch example.com\nnameserver 127.0.0.11\nnameserver 127.0.0.1\nnameserver ::ffff:192.0.2.1\nnameserver 0.0.0.0\nnameserver bogus\noptions ndots:0\n"
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readResolvConf(p)
	want := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.11:53"), netip.MustParseAddrPort("192.0.2.1:53")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("readResolvConf = %v, %v; want %v (the daemon's own address skipped)", got, err, want)
	}
	if err := os.WriteFile(p, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readResolvConf(p); err == nil {
		t.Error("a file naming only the daemon itself was accepted")
	}
}

func TestParseUpstreams(t *testing.T) {
	got, err := parseUpstreams("192.0.2.53, 192.0.2.54:5353,[2001:db8::1]:53")
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("192.0.2.54:5353"), netip.MustParseAddrPort("[2001:db8::1]:53")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parseUpstreams = %v, %v; want %v", got, err, want)
	}
	if _, err := parseUpstreams("dns.example.com"); err == nil {
		t.Error("a name was accepted as upstream")
	}
}

// TestStatsRoute: GET /stats reports the daemon's verdict counts.
func TestStatsRoute(t *testing.T) {
	d := &daemon{}
	d.dnsDenied.Add(2)
	d.connAllowed.Add(1)
	w := httptest.NewRecorder()
	d.routes().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/stats", nil))
	var got Stats
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got != (Stats{DNSDenied: 2, ConnAllowed: 1}) {
		t.Fatalf("GET /stats = %d %q (%v)", w.Code, w.Body.String(), err)
	}
}
