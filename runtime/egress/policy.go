// Package egress is sandboxd's egress policy as values: the rules of
// upstream's networkPolicy (parsed, matched, patched) and what the daemon
// that enforces them (package guard) and sandboxd say to each other. It
// links only the standard library: package runtime's interfaces carry its
// types.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Actions of a rule and of a policy's default.
const (
	Allow = "allow"
	Deny  = "deny"
)

// MaxRules bounds a policy, as upstream's OPENSANDBOX_EGRESS_MAX_RULES default.
const MaxRules = 4096

// Rule is one egress rule: a domain, a "*." wildcard, an IP or a CIDR.
type Rule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// Policy is upstream's networkPolicy. The field order is the one upstream's
// GET /policy serialises.
type Policy struct {
	Egress        []Rule `json:"egress"`
	DefaultAction string `json:"defaultAction"`
}

// ErrTooManyRules is returned by Normalize for a policy over MaxRules.
var ErrTooManyRules = errors.New("too many rules")

var domainRe = regexp.MustCompile(`^([a-z0-9_]([-a-z0-9_]*[a-z0-9_])?\.)*[a-z0-9_]([-a-z0-9_]*[a-z0-9_])?$`)

// normAction trims and lower-cases an action; empty means deny, as upstream.
func normAction(a string) (string, error) {
	a = strings.ToLower(strings.TrimSpace(a))
	switch a {
	case "":
		return Deny, nil
	case Allow, Deny:
		return a, nil
	}
	return "", fmt.Errorf("action %q must be allow or deny", a)
}

// NormalizeTarget checks a target and returns its canonical form: a
// lower-cased domain without trailing dot, "*." plus a domain, an IP or a
// masked CIDR.
func NormalizeTarget(t string) (string, error) {
	t = strings.TrimSpace(t)
	if t == "" {
		return "", errors.New("target must not be empty")
	}
	if a, err := netip.ParseAddr(t); err == nil {
		return a.Unmap().String(), nil
	}
	if p, err := netip.ParsePrefix(t); err == nil {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked().String(), nil
	}
	d := strings.TrimSuffix(strings.ToLower(t), ".")
	base, wild := strings.CutPrefix(d, "*.")
	if len(base) > 253 || !domainRe.MatchString(base) {
		return "", fmt.Errorf("target %q is not a domain, a *.domain wildcard, an IP or a CIDR", t)
	}
	if wild {
		return "*." + base, nil
	}
	return base, nil
}

// Normalize checks p and puts it in canonical form: actions lower-cased,
// targets canonical, a missing default deny, egress never nil.
func Normalize(p Policy) (Policy, error) {
	def, err := normAction(p.DefaultAction)
	if err != nil {
		return Policy{}, fmt.Errorf("defaultAction: %w", err)
	}
	rules, err := normalizeRules(p.Egress)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Egress: rules, DefaultAction: def}, nil
}

func normalizeRules(in []Rule) ([]Rule, error) {
	if len(in) > MaxRules {
		return nil, fmt.Errorf("%w: egress rule total count %d exceeds limit %d", ErrTooManyRules, len(in), MaxRules)
	}
	out := make([]Rule, 0, len(in))
	for i, r := range in {
		a, err := normAction(r.Action)
		if err != nil {
			return nil, fmt.Errorf("egress[%d]: %w", i, err)
		}
		t, err := NormalizeTarget(r.Target)
		if err != nil {
			return nil, fmt.Errorf("egress[%d]: %w", i, err)
		}
		out = append(out, Rule{Action: a, Target: t})
	}
	return out, nil
}

// Mode is upstream's mode field: allow_all, deny_all or enforcing.
func (p Policy) Mode() string {
	switch {
	case len(p.Egress) > 0:
		return "enforcing"
	case p.DefaultAction == Allow:
		return "allow_all"
	}
	return "deny_all"
}

// AllowsName decides a DNS name in presentation format (as a resolver
// reads it: `\.` is a dot inside a label): the first domain rule that
// matches wins, else the default. IP rules take no part. Rules match on
// labels, so `x\.wild.test` (two labels) is not below wild.test.
func (p Policy) AllowsName(name string) bool {
	labels := dnsLabels(name)
	for _, r := range p.Egress {
		if matchLabels(r.Target, labels) {
			return r.Action == Allow
		}
	}
	return p.DefaultAction == Allow
}

// AllowsConnection decides a connection to dst that asks for name (TLS SNI
// or HTTP Host, plain host names): a domain rule decides as for DNS; with
// none matching, an IP rule allowing dst lets it through, else the default
// decides.
func (p Policy) AllowsConnection(name string, dst netip.Addr) bool {
	labels := strings.Split(strings.TrimSuffix(strings.ToLower(name), "."), ".")
	for _, r := range p.Egress {
		if matchLabels(r.Target, labels) {
			return r.Action == Allow
		}
	}
	for _, pf := range p.Prefixes(Allow) {
		if pf.Contains(dst) {
			return true
		}
	}
	return p.DefaultAction == Allow
}

// matchLabels reports whether a name's labels match a canonical target: the
// same labels, or for "*.d" more labels ending with d's.
func matchLabels(target string, labels []string) bool {
	if suffix, ok := strings.CutPrefix(target, "*."); ok {
		t := strings.Split(suffix, ".")
		return len(labels) > len(t) && slices.Equal(labels[len(labels)-len(t):], t)
	}
	return slices.Equal(labels, strings.Split(target, "."))
}

// dnsLabels splits a name in presentation format into its labels,
// unescaped (`\.` and `\DDD`) and lower-cased; the root's empty label is
// left out.
func dnsLabels(name string) []string {
	var out []string
	var cur []byte
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '\\' && i+3 < len(name) && digit(name[i+1]) && digit(name[i+2]) && digit(name[i+3]):
			if v := int(name[i+1]-'0')*100 + int(name[i+2]-'0')*10 + int(name[i+3]-'0'); v <= 255 {
				cur = append(cur, byte(v))
			} else {
				cur = append(cur, name[i:i+4]...) // no byte: matches no rule
			}
			i += 3
		case c == '\\' && i+1 < len(name):
			cur = append(cur, name[i+1])
			i++
		case c == '.':
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	if len(cur) > 0 {
		out = append(out, strings.ToLower(string(cur)))
	}
	return out
}

// Prefixes returns the IP and CIDR rules of one action as prefixes.
func (p Policy) Prefixes(action string) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range p.Egress {
		if r.Action != action {
			continue
		}
		if a, err := netip.ParseAddr(r.Target); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		} else if pf, err := netip.ParsePrefix(r.Target); err == nil {
			out = append(out, pf)
		}
	}
	return out
}

// Patch merges rules into p as upstream's PATCH /policy: the patch rules
// first in payload order (deduplicated by target, first wins), then the
// existing rules whose targets the patch does not name.
func (p Policy) Patch(rules []Rule) (Policy, error) {
	if len(rules) == 0 {
		return Policy{}, errors.New("empty array")
	}
	patch, err := normalizeRules(rules)
	if err != nil {
		return Policy{}, err
	}
	seen := map[string]bool{}
	out := Policy{DefaultAction: p.DefaultAction, Egress: []Rule{}}
	for _, r := range append(patch, p.Egress...) {
		if !seen[r.Target] {
			seen[r.Target] = true
			out.Egress = append(out.Egress, r)
		}
	}
	if len(out.Egress) > MaxRules {
		return Policy{}, fmt.Errorf("%w: egress rule total count %d exceeds limit %d", ErrTooManyRules, len(out.Egress), MaxRules)
	}
	return out, nil
}

// Without removes the rules naming any of targets (compared canonically)
// and reports whether any was removed.
func (p Policy) Without(targets []string) (Policy, bool, error) {
	if len(targets) == 0 {
		return Policy{}, false, errors.New("empty array")
	}
	drop := map[string]bool{}
	for _, t := range targets {
		n, err := NormalizeTarget(t)
		if err != nil {
			// An unknown, even malformed, target matches nothing, as upstream.
			n = strings.ToLower(strings.TrimSpace(t))
		}
		drop[n] = true
	}
	out := Policy{DefaultAction: p.DefaultAction, Egress: []Rule{}}
	for _, r := range p.Egress {
		if !drop[r.Target] {
			out.Egress = append(out.Egress, r)
		}
	}
	return out, len(out.Egress) != len(p.Egress), nil
}

// Stats are a daemon's verdicts since it started: lookups answered by its
// resolver, and connections on 80/443 its proxy decided by name (others
// are decided by address in the kernel and not counted).
type Stats struct {
	DNSAllowed  uint64 `json:"dnsAllowed"`
	DNSDenied   uint64 `json:"dnsDenied"`
	ConnAllowed uint64 `json:"connectionsAllowed"`
	ConnDenied  uint64 `json:"connectionsDenied"`
}
