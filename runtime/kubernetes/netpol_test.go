package kubernetes

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

func TestEgressRules(t *testing.T) {
	allow := func(t string) egress.Rule { return egress.Rule{Action: egress.Allow, Target: t} }
	deny := func(t string) egress.Rule { return egress.Rule{Action: egress.Deny, Target: t} }
	tests := []struct {
		name string
		pol  egress.Policy
		want string // the blocks allowed, as fmt prints them
		err  string
	}{
		{"deny all", egress.Policy{DefaultAction: egress.Deny}, "[]", ""},
		{"allow cidrs", egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{allow("10.0.0.0/8"), allow("192.0.2.1")}},
			"[10.0.0.0/8 [] 192.0.2.1/32 []]", ""},
		{"earlier deny inside an allow", egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{deny("10.1.0.0/16"), allow("10.0.0.0/8")}},
			"[10.0.0.0/8 [10.1.0.0/16]]", ""},
		{"later deny is shadowed", egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{allow("10.0.0.0/8"), deny("10.1.0.0/16")}},
			"[10.0.0.0/8 []]", ""},
		{"allow all but", egress.Policy{DefaultAction: egress.Allow, Egress: []egress.Rule{deny("169.254.169.254"), deny("fd00::/8")}},
			"[0.0.0.0/0 [169.254.169.254/32] ::/0 [fd00::/8]]", ""},
		{"deny wider than a later allow", egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{deny("10.0.0.0/8"), allow("10.1.0.0/16")}},
			"", "cannot be expressed"},
		{"domain", egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{allow("pypi.org")}}, "", "Docker runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, err := egressRules(tt.pol)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one saying %q", err, tt.err)
				}
				if tt.err == "Docker runtime" && !errors.Is(err, ErrDomainRules) {
					t.Errorf("%v is not ErrDomainRules", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []any
			for _, r := range rules {
				for _, p := range r.To {
					got = append(got, p.IPBlock.CIDR, p.IPBlock.Except)
				}
			}
			if s := fmt.Sprint(got); s != tt.want {
				t.Errorf("blocks %s, want %s", s, tt.want)
			}
		})
	}
}
