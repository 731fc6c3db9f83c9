package guard

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// Mark is the socket mark of the daemon's own upstream DNS queries: the
// only traffic the chain lets through to the upstream resolvers. Setting a
// mark needs NET_ADMIN (or NET_RAW), which a policed sandbox never has.
const Mark = 0x5d1

const tableName = "sandboxd_egress"

// ruleset is everything the output chain is built from.
type ruleset struct {
	policy    egress.Policy
	upstreams []netip.Addr   // DNS to them only with Mark
	guarded   []netip.Prefix // dropped unless an IP rule allows them
	learned   []learnedAddr  // addresses of allowed names, with their lifetime
}

type learnedAddr struct {
	addr netip.Addr
	ttl  time.Duration
}

// firewall programs the table in the current network namespace.
type firewall struct {
	conn       *nftables.Conn
	table      *nftables.Table
	dyn4, dyn6 *nftables.Set
}

func newFirewall() (*firewall, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return &firewall{conn: c}, nil
}

// apply replaces the whole table in one atomic batch: there is never a
// moment without the default drop.
func (f *firewall) apply(rs ruleset) error {
	c := f.conn
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	// Add then delete then add: the delete never fails on a fresh namespace.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	dyn4 := &nftables.Set{Table: t, Name: "dyn4", KeyType: nftables.TypeIPAddr, HasTimeout: true}
	dyn6 := &nftables.Set{Table: t, Name: "dyn6", KeyType: nftables.TypeIP6Addr, HasTimeout: true}
	var e4, e6 []nftables.SetElement
	for _, l := range rs.learned {
		el := nftables.SetElement{Key: l.addr.AsSlice(), Timeout: l.ttl}
		if l.addr.Is4() {
			e4 = append(e4, el)
		} else {
			e6 = append(e6, el)
		}
	}
	if err := c.AddSet(dyn4, e4); err != nil {
		return err
	}
	if err := c.AddSet(dyn6, e6); err != nil {
		return err
	}
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{
		Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	add := func(verdict expr.VerdictKind, match ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(match, &expr.Verdict{Kind: verdict})})
	}
	accept, reject := expr.VerdictAccept, expr.VerdictDrop

	add(accept, ctEstablished()...)
	add(accept, &expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(Mark)})
	// Docker's embedded resolver sits on loopback, on a port of its own:
	// only the daemon may use it. Other upstreams are closed by the port 53
	// rules below.
	for _, u := range rs.upstreams {
		if u.IsLoopback() {
			add(reject, daddr(netip.PrefixFrom(u, u.BitLen()))...)
		}
	}
	add(accept, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")})
	// Loopback by address too: a packet redirected to the peeking proxy
	// still shows its first output interface here.
	for _, lo := range []string{"127.0.0.0/8", "::1/128"} {
		add(accept, daddr(netip.MustParsePrefix(lo))...)
	}
	// IPv6 stays closed beyond loopback, whatever the rules: the Host/SNI
	// proxy reads IPv4 destinations only, and the resolver answers no AAAA.
	add(reject, family(unix.NFPROTO_IPV6)...)
	// DNS goes to the daemon on loopback only; DoT nowhere.
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		for _, port := range []uint16{53, 853} {
			add(reject, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)})
		}
	}
	// IP rules: deny beats allow whatever the order, as upstream.
	for _, p := range rs.policy.Prefixes(egress.Deny) {
		add(reject, daddr(p)...)
	}
	for _, p := range rs.policy.Prefixes(egress.Allow) {
		add(accept, daddr(p)...)
	}
	// The host, link-local (metadata) and private ranges stay closed even
	// to allowed names (DNS rebinding) and under defaultAction allow.
	for _, p := range rs.guarded {
		add(reject, daddr(p)...)
	}
	add(accept, append(family(unix.NFPROTO_IPV4), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: dyn4.Name, SetID: dyn4.ID})...)
	add(accept, append(family(unix.NFPROTO_IPV6), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
		&expr.Lookup{SourceRegister: 1, SetName: dyn6.Name, SetID: dyn6.ID})...)
	if rs.policy.DefaultAction == egress.Allow {
		add(accept)
	}
	// New TCP to 80 and 443 goes to the peeking proxy first (IPv4, the
	// only family let out: the original destination is a sockaddr_in).
	nat := c.AddChain(&nftables.Chain{
		Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	for port, to := range map[uint16]uint16{80: httpProxyPort, 443: tlsProxyPort} {
		match := append(family(unix.NFPROTO_IPV4),
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(Mark)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(ProxyMark)},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(to)},
			&expr.Redir{RegisterProtoMin: 1},
		)
		c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: match})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("apply nftables: %w", err)
	}
	f.table, f.dyn4, f.dyn6 = t, dyn4, dyn6
	return nil
}

// learn lets the sandbox reach addr for ttl. An address already in the set
// is replaced, so its lifetime follows the newest answer.
func (f *firewall) learn(addr netip.Addr, ttl time.Duration, present bool) error {
	set := f.dyn4
	if addr.Is6() {
		set = f.dyn6
	}
	if set == nil {
		return fmt.Errorf("nftables: no table applied")
	}
	el := []nftables.SetElement{{Key: addr.AsSlice(), Timeout: ttl}}
	if present {
		if err := f.conn.SetDeleteElements(set, el); err != nil {
			return err
		}
	}
	if err := f.conn.SetAddElements(set, el); err != nil {
		return err
	}
	return f.conn.Flush()
}

// family matches packets of one protocol family (NFPROTO_IPV4 or _IPV6).
func family(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// daddr matches packets to p (of either family).
func daddr(p netip.Prefix) []expr.Any {
	fam, off := byte(unix.NFPROTO_IPV4), uint32(16)
	if p.Addr().Is6() {
		fam, off = unix.NFPROTO_IPV6, 24
	}
	size := uint32(p.Addr().BitLen() / 8)
	out := append(family(fam), &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: size})
	if p.Bits() < p.Addr().BitLen() {
		mask := make([]byte, size)
		for i := 0; i < p.Bits(); i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: size, Mask: mask, Xor: make([]byte, size)})
	}
	return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}
