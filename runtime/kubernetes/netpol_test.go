//go:build linux

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"
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

// Sandboxd's isolated network is a NetworkPolicy denying ingress to the
// pods labelled onto it; a policy of that name that lets traffic in is
// refused, not silently used.
func TestIsolatedNetwork(t *testing.T) {
	cs := fake.NewClientset()
	k := newWithClient(cs, testOptions())
	ctx := context.Background()
	for range 2 { // idempotent
		if err := k.EnsureIsolatedNetwork(ctx, "sandboxd", map[string]string{"io.sandboxd.network": "isolated"}); err != nil {
			t.Fatal(err)
		}
	}
	spec := hardenedSpec()
	spec.Network = runtime.Network{Mode: runtime.NetworkIsolated, Name: "sandboxd"}
	id, err := k.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := cs.CoreV1().Pods("sandboxes").Get(ctx, id, metav1.GetOptions{})
	np, _ := cs.NetworkingV1().NetworkPolicies("sandboxes").Get(ctx, "sandboxd-network-sandboxd", metav1.GetOptions{})
	sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if !sel.Matches(labels.Set(pod.Labels)) || len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 1 {
		t.Errorf("policy %+v does not deny all ingress to pod labels %v", np.Spec, pod.Labels)
	}
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}} // allow all
	cs.NetworkingV1().NetworkPolicies("sandboxes").Update(ctx, np, metav1.UpdateOptions{})
	if err := k.EnsureIsolatedNetwork(ctx, "sandboxd", nil); err == nil {
		t.Error("a policy letting traffic in was accepted")
	}
	spec.Name, spec.Network = "sandbox-2", runtime.Network{Mode: runtime.NetworkNamed, Name: "corp"}
	if _, err := k.Create(ctx, spec); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Create on a named network = %v, want ErrNotSupported", err)
	}
}

// A sandbox with an egress policy of address rules (AddressPolicies) is
// created with its NetworkPolicy, owned by its pod; a domain rule is
// refused before anything is created.
func TestAddressPolicyOnFakeCluster(t *testing.T) {
	cs, k, _ := fakeCluster()
	ctx := context.Background()
	pol := egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "10.0.0.0/8"}}}
	if err := k.CheckAddressPolicy(pol); err != nil {
		t.Fatalf("CheckAddressPolicy(CIDR rule) = %v", err)
	}
	spec := hardenedSpec()
	spec.Network = runtime.Network{Policy: &pol}
	id, err := k.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	np, err := cs.NetworkingV1().NetworkPolicies("sandboxes").Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no NetworkPolicy for a policed sandbox: %v", err)
	}
	if e := np.Spec.Egress; len(e) != 1 || len(e[0].To) != 1 || e[0].To[0].IPBlock.CIDR != "10.0.0.0/8" || len(np.OwnerReferences) != 1 {
		t.Errorf("policy %+v, want egress to 10.0.0.0/8 only, owned by the pod", np.Spec)
	}
	domain := egress.Policy{DefaultAction: egress.Deny, Egress: []egress.Rule{{Action: egress.Allow, Target: "pypi.org"}}}
	if err := k.CheckAddressPolicy(domain); !errors.Is(err, ErrDomainRules) {
		t.Errorf("CheckAddressPolicy(domain rule) = %v, want ErrDomainRules", err)
	}
}
