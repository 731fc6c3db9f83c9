package egress

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestNormalizeTarget(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM.":   "example.com",
		" *.Example.com": "*.example.com",
		"10.1.2.3":       "10.1.2.3",
		"10.1.2.3/8":     "10.0.0.0/8",
		"::ffff:1.2.3.4": "1.2.3.4",
		"2001:DB8::1/32": "2001:db8::/32",
		"_srv.a-b.io":    "_srv.a-b.io",
	} {
		if got, err := NormalizeTarget(in); err != nil || got != want {
			t.Errorf("NormalizeTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", " ", "http://a.com", "foo bar", "*foo.com", "a.*.com", "-a.com", "a..com", "*."} {
		if got, err := NormalizeTarget(in); err == nil {
			t.Errorf("NormalizeTarget(%q) = %q, want an error", in, got)
		}
	}
}

func TestNormalize(t *testing.T) {
	p, err := Normalize(Policy{Egress: []Rule{{Action: " ALLOW ", Target: "A.com"}, {Target: "b.com"}}})
	want := Policy{DefaultAction: Deny, Egress: []Rule{{Allow, "a.com"}, {Deny, "b.com"}}}
	if err != nil || !reflect.DeepEqual(p, want) {
		t.Errorf("Normalize = %+v, %v; want %+v", p, err, want)
	}
	if p, _ := Normalize(Policy{}); p.Egress == nil || p.DefaultAction != Deny {
		t.Errorf("Normalize of the empty policy = %+v, want deny with [] rules", p)
	}
	for _, bad := range []Policy{{DefaultAction: "block"}, {Egress: []Rule{{Action: "block", Target: "a.com"}}}, {Egress: []Rule{{Action: Allow}}}} {
		if _, err := Normalize(bad); err == nil {
			t.Errorf("Normalize(%+v) accepted", bad)
		}
	}
	if _, err := Normalize(Policy{Egress: make([]Rule, MaxRules+1)}); !errors.Is(err, ErrTooManyRules) {
		t.Errorf("over the cap: %v", err)
	}
}

func TestAllowsName(t *testing.T) {
	p := Policy{DefaultAction: Deny, Egress: []Rule{
		{Deny, "bad.example.com"}, {Allow, "*.example.com"}, {Allow, "pypi.org"}, {Allow, "10.0.0.0/8"},
	}}
	for name, want := range map[string]bool{
		"pypi.org": true, "PyPI.org.": true, "www.pypi.org": false,
		"a.example.com": true, "a.b.example.com": true, "example.com": false, "bad.example.com": false,
		"other.net": false, "10.0.0.1": false,
		// Names as a resolver presents them: labels, not strings.
		`x\.example.com`: false, `a\.b.com`: false, `a.example\.com`: false, `a.\101xample.com`: true,
		`a\046example.com`: false, `\112ypi.org`: true, `pypi\.org`: false, `a.example.com\`: false,
		`a.\999xample.com`: false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v, want %v", name, got, want)
		}
	}
	if !(Policy{DefaultAction: Allow}).AllowsName("any.where") {
		t.Error("defaultAction allow denies an unmatched name")
	}
}

func TestPrefixes(t *testing.T) {
	p := Policy{Egress: []Rule{{Allow, "1.2.3.4"}, {Deny, "10.0.0.0/8"}, {Allow, "a.com"}, {Allow, "2001:db8::/32"}}}
	want := []netip.Prefix{netip.MustParsePrefix("1.2.3.4/32"), netip.MustParsePrefix("2001:db8::/32")}
	if got := p.Prefixes(Allow); !reflect.DeepEqual(got, want) {
		t.Errorf("Prefixes(allow) = %v, want %v", got, want)
	}
}

func TestPatch(t *testing.T) {
	cur := Policy{DefaultAction: Deny, Egress: []Rule{{Allow, "pypi.org"}, {Allow, "a.com"}}}
	got, err := cur.Patch([]Rule{{Allow, "www.github.com"}, {Deny, "PyPI.org"}, {Allow, "www.github.com"}})
	want := Policy{DefaultAction: Deny, Egress: []Rule{{Allow, "www.github.com"}, {Deny, "pypi.org"}, {Allow, "a.com"}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Patch = %+v, %v; want %+v", got, err, want)
	}
	if _, err := cur.Patch(nil); err == nil {
		t.Error("an empty patch was accepted")
	}
	if _, err := cur.Patch([]Rule{{Action: "nope", Target: "a.com"}}); err == nil {
		t.Error("a bad rule was accepted")
	}
}

func TestWithout(t *testing.T) {
	cur := Policy{DefaultAction: Allow, Egress: []Rule{{Allow, "pypi.org"}, {Deny, "a.com"}}}
	got, removed, err := cur.Without([]string{" PYPI.org ", "nonexistent.example.com", "not a target"})
	want := Policy{DefaultAction: Allow, Egress: []Rule{{Deny, "a.com"}}}
	if err != nil || !removed || !reflect.DeepEqual(got, want) {
		t.Errorf("Without = %+v, %v, %v; want %+v", got, removed, err, want)
	}
	if _, removed, _ := got.Without([]string{"pypi.org"}); removed {
		t.Error("a second delete removed something")
	}
	if _, _, err := cur.Without(nil); err == nil {
		t.Error("an empty delete was accepted")
	}
}

func TestMode(t *testing.T) {
	for p, want := range map[*Policy]string{
		{DefaultAction: Allow}:                              "allow_all",
		{DefaultAction: Deny}:                               "deny_all",
		{DefaultAction: Allow, Egress: []Rule{{Deny, "a"}}}: "enforcing",
	} {
		if got := p.Mode(); got != want {
			t.Errorf("%+v.Mode() = %q, want %q", *p, got, want)
		}
	}
}

func TestAllowsConnection(t *testing.T) {
	ip := netip.MustParseAddr
	p := Policy{DefaultAction: Deny, Egress: []Rule{{Deny, "bad.com"}, {Allow, "good.com"}, {Allow, "198.18.0.0/16"}}}
	for _, c := range []struct {
		name string
		dst  netip.Addr
		want bool
	}{
		{"good.com", ip("203.0.113.1"), true},
		{"bad.com", ip("198.18.0.5"), false}, // a deny rule beats an allowed address
		{"other.com", ip("198.18.0.5"), true},
		{"other.com", ip("203.0.113.1"), false},
	} {
		if got := p.AllowsConnection(c.name, c.dst); got != c.want {
			t.Errorf("AllowsConnection(%q, %v) = %v, want %v", c.name, c.dst, got, c.want)
		}
	}
	if !(Policy{DefaultAction: Allow, Egress: []Rule{{Deny, "bad.com"}}}).AllowsConnection("x.com", ip("203.0.113.1")) {
		t.Error("defaultAction allow refuses an unmatched name")
	}
}
