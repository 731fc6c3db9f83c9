// Package guard is the egress daemon: it runs in a helper container that
// owns a sandbox's network namespace and enforces an egress policy there
// (nftables through netlink, a filtering DNS resolver, SNI and Host checks).
package guard

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxd/sandboxd/runtime/agent"
	"github.com/sandboxd/sandboxd/runtime/egress"
)

// listenAddr is the resolver the sandbox is pointed at.
const listenAddr = "127.0.0.1:53"

// Learned addresses live TTL+learnSlack, within [learnMin, learnMax], as
// upstream's sidecar does.
const (
	learnSlack = 60 * time.Second
	learnMin   = 60 * time.Second
	learnMax   = 360 * time.Second
)

// Main runs `sandboxd egress hold` (a main process that only holds its
// network namespace), `sandboxd egress guard --upstream ip:port,...` (the
// helper's main process: it puts the default drop in force, says Ready,
// then holds) or `sandboxd egress serve --upstream ...` (the enforcing
// daemon, started by sandboxd over exec, controlled over its stdin and
// stdout).
func Main(ctx context.Context, args []string, log *slog.Logger) error {
	if len(args) == 0 {
		return fmt.Errorf("egress: want hold, guard or serve")
	}
	switch args[0] {
	case "hold":
		hold(ctx)
		return nil
	case "guard", "serve":
		fs := flag.NewFlagSet("egress "+args[0], flag.ContinueOnError)
		up := fs.String("upstream", "", "comma-separated upstream resolvers (ip or ip:port)")
		sandbox := fs.String("sandbox", "", "id of the sandbox, for the log")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		log = log.With("sandbox_id", *sandbox)
		ups, err := parseUpstreams(*up)
		if err != nil {
			return err
		}
		if args[0] == "serve" {
			return serve(ctx, ups, log)
		}
		return guard(ctx, ups)
	}
	return fmt.Errorf("egress: unknown subcommand %q", args[0])
}

func hold(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-ctx.Done():
	}
}

// guard programs the table the daemon starts with (everything dropped but
// loopback) before sandboxd gives the namespace an interface, so that the
// interface is policed from its first packet while the daemon starts.
func guard(ctx context.Context, upstreams []netip.AddrPort) error {
	fw, err := newFirewall()
	if err != nil {
		return err
	}
	d := &daemon{fw: fw, upstreams: upstreams, policy: denyAll()}
	if err := d.setPolicy(d.policy, nil); err != nil {
		return err
	}
	if _, err := fmt.Println(egress.Ready); err != nil {
		return err
	}
	hold(ctx)
	return nil
}

func denyAll() egress.Policy {
	return egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{}}
}

func parseUpstreams(s string) ([]netip.AddrPort, error) {
	if s == "" {
		return nil, errors.New("egress: --upstream is required")
	}
	var out []netip.AddrPort
	for _, f := range strings.Split(s, ",") {
		ap, err := netip.ParseAddrPort(strings.TrimSpace(f))
		if err != nil {
			a, aerr := netip.ParseAddr(strings.TrimSpace(f))
			if aerr != nil {
				return nil, fmt.Errorf("egress: upstream %q: %w", f, err)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		out = append(out, ap)
	}
	return out, nil
}

// daemon enforces one policy in the network namespace it runs in.
type daemon struct {
	log       *slog.Logger
	fw        *firewall
	upstreams []netip.AddrPort
	client    *dns.Client

	// verdicts, reported on GET /stats
	dnsAllowed, dnsDenied, connAllowed, connDenied atomic.Uint64

	mu      sync.Mutex
	policy  egress.Policy
	host    []netip.Addr // the host's own addresses, closed like the gateway
	learned map[netip.Addr]learned
}

type learned struct {
	name    string
	expires time.Time
}

func serve(ctx context.Context, upstreams []netip.AddrPort, log *slog.Logger) error {
	fw, err := newFirewall()
	if err != nil {
		return err
	}
	d := &daemon{
		log: log, fw: fw, upstreams: upstreams,
		policy:  denyAll(),
		learned: map[netip.Addr]learned{},
	}
	d.client = &dns.Client{Timeout: 5 * time.Second, Dialer: &net.Dialer{Control: markSocket}}
	// The peeking proxies listen before the redirect to them exists.
	for port, tls := range map[int]bool{httpProxyPort: false, tlsProxyPort: true} {
		ln, err := d.listenPeek(port, tls)
		if err != nil {
			return fmt.Errorf("egress: proxy on port %d: %w", port, err)
		}
		defer ln.Close()
	}
	// Deny everything until sandboxd sends the policy.
	if err := d.setPolicy(d.policy, nil); err != nil {
		return err
	}
	dnsUDP := &dns.Server{Addr: listenAddr, Net: "udp", Handler: d}
	dnsTCP := &dns.Server{Addr: listenAddr, Net: "tcp", Handler: d}
	errc := make(chan error, 2)
	for _, s := range []*dns.Server{dnsUDP, dnsTCP} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { errc <- s.ListenAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			return fmt.Errorf("egress: dns %s: %w", s.Net, err)
		}
		defer s.Shutdown()
	}
	if err := pointResolver(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if err := <-errc; err != nil {
			log.Error("egress: dns server stopped", "err", err)
		}
		cancel()
	}()
	return agent.ServeStdio(ctx, d.routes(), os.Stdin, os.Stdout, log)
}

// pointResolver points the sandbox's resolver file at the daemon. Docker
// rewrites the file when it connects the sandbox to a network, so every
// policy sandboxd sends points it again.
func pointResolver() error {
	if err := os.WriteFile(egress.ResolvConf, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return fmt.Errorf("egress: point %s at the resolver: %w", egress.ResolvConf, err)
	}
	return nil
}

// GuardedPrefixes are closed under any policy unless an IP rule opens them:
// link-local (cloud metadata), private, shared and multicast ranges. (The
// namespace's own loopback is the sandbox's; the host, its gateway and its
// own addresses, is guarded separately.)
func GuardedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16",
		"172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
		"::ffff:0:0/96", "fc00::/7", "fe80::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// gateways returns the default gateways of this namespace: the engine's
// host as the sandbox sees it.
func gateways() []netip.Prefix {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" {
			continue
		}
		v, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil || v == 0 {
			continue
		}
		// /proc/net/route is in host byte order (little-endian here).
		a := netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
		out = append(out, netip.PrefixFrom(a, 32))
	}
	return out
}

func markSocket(_, _ string, c syscall.RawConn) error { return setMark(c, Mark) }

func setMark(c syscall.RawConn, mark int) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, mark)
	})
	if err != nil {
		return err
	}
	return serr
}

// setPolicy programs p with the host's addresses closed, keeping the
// learned addresses of names p still allows.
func (d *daemon) setPolicy(p egress.Policy, host []netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	// The gateway is read at each change: the daemon may start before the
	// sandbox has its interface, and the policy it is sent comes after.
	rs := ruleset{policy: p, guarded: append(GuardedPrefixes(), gateways()...)}
	for _, a := range host {
		rs.guarded = append(rs.guarded, netip.PrefixFrom(a, a.BitLen()))
	}
	for _, u := range d.upstreams {
		rs.upstreams = append(rs.upstreams, u.Addr())
	}
	keep := map[netip.Addr]learned{}
	for a, l := range d.learned {
		if ttl := l.expires.Sub(now); ttl > time.Second && p.AllowsName(l.name) {
			keep[a] = l
			rs.learned = append(rs.learned, learnedAddr{a, ttl.Truncate(time.Second)})
		}
	}
	if err := d.fw.apply(rs); err != nil {
		return err
	}
	d.policy, d.host, d.learned = p, host, keep
	return nil
}

// ServeDNS answers the sandbox: denied names NXDOMAIN, allowed ones
// forwarded, their addresses opened before the answer is sent.
func (d *daemon) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	if len(q.Question) == 0 {
		m := new(dns.Msg)
		m.SetReply(q)
		_ = w.WriteMsg(m)
		return
	}
	name := q.Question[0].Name
	d.mu.Lock()
	allowed := d.policy.AllowsName(name)
	d.mu.Unlock()
	if !allowed {
		// sandboxd rate-limits the lines it logs from this stderr.
		d.log.Warn("egress: denied lookup", "name", name)
		d.dnsDenied.Add(1)
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeNameError)
		_ = w.WriteMsg(m)
		return
	}
	if q.Question[0].Qtype == dns.TypeAAAA {
		// No IPv6 under a policy (the firewall drops it): no address, so
		// that clients use IPv4 at once.
		d.dnsAllowed.Add(1)
		m := new(dns.Msg)
		m.SetReply(q)
		_ = w.WriteMsg(m)
		return
	}
	resp := d.forward(q, w.LocalAddr().Network())
	if resp == nil {
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
		return
	}
	d.dnsAllowed.Add(1)
	resp.Answer = slices.DeleteFunc(resp.Answer, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeAAAA })
	// The additional section goes only with EDNS's OPT: records an upstream
	// adds there (glue, names nobody asked for) would reach the sandbox's
	// resolver unjudged by the policy.
	resp.Extra = slices.DeleteFunc(resp.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype != dns.TypeOPT })
	d.learn(name, resp)
	_ = w.WriteMsg(resp)
}

// forward tries the upstreams in order; NOERROR and NXDOMAIN are final.
func (d *daemon) forward(q *dns.Msg, network string) *dns.Msg {
	c := *d.client
	c.Net = network
	for _, u := range d.upstreams {
		resp, _, err := c.Exchange(q, u.String())
		if err == nil && (resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError) {
			return resp
		}
	}
	return nil
}

func (d *daemon) learn(name string, resp *dns.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.policy.AllowsName(name) {
		return // the policy changed while the query was out
	}
	for _, rr := range resp.Answer {
		v, ok := rr.(*dns.A)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(v.A)
		if !ok {
			continue
		}
		a = a.Unmap()
		ttl := min(max(time.Duration(rr.Header().Ttl)*time.Second+learnSlack, learnMin), learnMax)
		old, present := d.learned[a]
		if present && time.Until(old.expires) > ttl/2 {
			// Still open for a good while: a netlink commit costs
			// milliseconds, a repeated lookup should not.
			d.learned[a] = learned{name: strings.ToLower(name), expires: old.expires}
			continue
		}
		if err := d.fw.learn(a, ttl, present); err != nil {
			d.log.Error("egress: open learned address", "addr", a, "err", err)
			continue
		}
		d.learned[a] = learned{name: strings.ToLower(name), expires: time.Now().Add(ttl)}
	}
}

// routes is the control API sandboxd reaches over the exec stream.
func (d *daemon) routes() http.Handler {
	mux := http.NewServeMux()
	// /ping is how sandboxd's exec transport knows the session is up.
	mux.HandleFunc("GET /ping", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(egress.Stats{
			DNSAllowed: d.dnsAllowed.Load(), DNSDenied: d.dnsDenied.Load(),
			ConnAllowed: d.connAllowed.Load(), ConnDenied: d.connDenied.Load(),
		})
	})
	mux.HandleFunc("PUT /policy", func(w http.ResponseWriter, r *http.Request) {
		var e egress.Enforced
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&e); err != nil {
			http.Error(w, "invalid policy: "+err.Error(), http.StatusBadRequest)
			return
		}
		p, err := egress.Normalize(e.Policy)
		if err != nil {
			http.Error(w, "invalid policy: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := d.setPolicy(p, e.Host); err != nil {
			http.Error(w, "failed to apply nftables policy: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if err := pointResolver(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ups := make([]string, 0, len(d.upstreams))
		for _, u := range d.upstreams {
			ups = append(ups, u.String())
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"upstreams": ups})
	})
	return mux
}
