//go:build linux

package guard

import (
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

func TestParseUpstreams(t *testing.T) {
	got, err := parseUpstreams("192.0.2.53, 192.0.2.54:5353,[2001:db8::1]:53")
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("192.0.2.54:5353"), netip.MustParseAddrPort("[2001:db8::1]:53")}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parseUpstreams = %v, %v; want %v", got, err, want)
	}
	if _, err := parseUpstreams("dns.example.com"); err == nil {
		t.Error("a name was accepted as upstream")
	}
	// Never the resolver file, which the sandbox can write.
	if _, err := parseUpstreams(""); err == nil {
		t.Error("no upstream accepted")
	}
}

// TestStatsRoute: GET /stats reports the daemon's verdict counts.
func TestStatsRoute(t *testing.T) {
	d := &daemon{}
	d.dnsDenied.Add(2)
	d.connAllowed.Add(1)
	w := httptest.NewRecorder()
	d.routes().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/stats", nil))
	var got egress.Stats
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got != (egress.Stats{DNSDenied: 2, ConnAllowed: 1}) {
		t.Fatalf("GET /stats = %d %q (%v)", w.Code, w.Body.String(), err)
	}
}

// dnsRecorder is a dns.ResponseWriter that keeps the answer.
type dnsRecorder struct {
	dns.ResponseWriter
	msg *dns.Msg
}

func (r *dnsRecorder) WriteMsg(m *dns.Msg) error { r.msg = m; return nil }
func (r *dnsRecorder) LocalAddr() net.Addr       { return &net.UDPAddr{} }

// TestServeAAAA: an allowed name gets no IPv6 address (the firewall keeps
// IPv6 closed), without a query upstream; a denied one is NXDOMAIN.
func TestServeAAAA(t *testing.T) {
	d := &daemon{log: slog.New(slog.DiscardHandler), policy: egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "allowed.test"}}}}
	for name, rcode := range map[string]int{"allowed.test.": dns.RcodeSuccess, "denied.test.": dns.RcodeNameError} {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeAAAA)
		w := &dnsRecorder{}
		d.ServeDNS(w, q) // no upstreams: a forwarded query would answer SERVFAIL
		if w.msg == nil || w.msg.Rcode != rcode || len(w.msg.Answer) != 0 {
			t.Errorf("AAAA %s = %v, want rcode %d and no answer", name, w.msg, rcode)
		}
	}
}

// TestServeStripsAdditional: an allowed name's answer reaches the sandbox
// without the upstream's additional records (an address for a name the
// policy denies, here), but for EDNS's OPT.
func TestServeStripsAdditional(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		txt, _ := dns.NewRR(q.Question[0].Name + " 60 IN TXT \"hello\"")
		extra, _ := dns.NewRR("denied.test. 60 IN A 192.0.2.66")
		m.Answer = []dns.RR{txt}
		m.Extra = []dns.RR{extra}
		m.SetEdns0(1232, false)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = up.ActivateAndServe() }()
	defer up.Shutdown()
	d := &daemon{
		log: slog.New(slog.DiscardHandler), client: &dns.Client{},
		upstreams: []netip.AddrPort{netip.MustParseAddrPort(pc.LocalAddr().String())},
		policy:    egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "allowed.test"}}},
	}
	q := new(dns.Msg)
	q.SetQuestion("allowed.test.", dns.TypeTXT)
	q.SetEdns0(1232, false)
	w := &dnsRecorder{}
	d.ServeDNS(w, q)
	if w.msg == nil || w.msg.Rcode != dns.RcodeSuccess || len(w.msg.Answer) != 1 {
		t.Fatalf("answer %v", w.msg)
	}
	if len(w.msg.Extra) != 1 || w.msg.Extra[0].Header().Rrtype != dns.TypeOPT {
		t.Errorf("additional section %v, want the OPT only", w.msg.Extra)
	}
}
