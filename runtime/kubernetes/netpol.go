package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// ErrDomainRules refuses what a NetworkPolicy cannot say.
var ErrDomainRules = errors.New("domain rules need the Docker runtime's egress helper (a NetworkPolicy matches addresses only); use IP or CIDR rules on Kubernetes")

// networkPolicy returns the NetworkPolicy enforcing pol on pod: all
// ingress denied (sandboxes are reached over exec, never their IP) and
// egress only where pol allows. A NetworkPolicy lists what is allowed, so
// a deny rule is kept only where it lies inside the allowed address
// ranges (as an except); domain rules cannot be expressed at all. nil pol
// denies all egress.
func networkPolicy(pod *corev1.Pod, pol *egress.Policy) (*networkingv1.NetworkPolicy, error) {
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelPod: pod.Name}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
	if pol != nil {
		rules, err := egressRules(*pol)
		if err != nil {
			return nil, err
		}
		spec.Egress = rules
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace,
			Labels: map[string]string{labelManagedBy: managedBy, labelPod: pod.Name},
		},
		Spec: spec,
	}, nil
}

// egressRules maps pol's rules, in order (the first match wins), onto
// allowed address blocks.
func egressRules(pol egress.Policy) ([]networkingv1.NetworkPolicyEgressRule, error) {
	type block struct {
		cidr   netip.Prefix
		except []netip.Prefix
	}
	var allowed []block
	var denied []netip.Prefix // deny rules seen so far
	for _, r := range pol.Egress {
		p, err := prefix(r.Target)
		if err != nil {
			return nil, err
		}
		if r.Action == egress.Allow {
			b := block{cidr: p}
			for _, d := range denied {
				switch {
				case d.Bits() >= p.Bits() && p.Contains(d.Addr()):
					b.except = append(b.except, d) // an earlier deny inside it
				case d.Overlaps(p):
					return nil, fmt.Errorf("networkPolicy: deny %s before allow %s cannot be expressed as a NetworkPolicy", d, p)
				}
			}
			allowed = append(allowed, b)
		} else {
			denied = append(denied, p)
		}
	}
	if pol.DefaultAction == egress.Allow {
		for _, all := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
			b := block{cidr: all}
			for _, d := range denied {
				if d.Addr().Is4() == all.Addr().Is4() {
					b.except = append(b.except, d)
				}
			}
			allowed = append(allowed, b)
		}
	}
	var peers []networkingv1.NetworkPolicyPeer
	for _, b := range allowed {
		ib := &networkingv1.IPBlock{CIDR: b.cidr.String()}
		for _, e := range b.except {
			ib.Except = append(ib.Except, e.String())
		}
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: ib})
	}
	if len(peers) == 0 {
		return nil, nil
	}
	return []networkingv1.NetworkPolicyEgressRule{{To: peers}}, nil
}

// prefix is a rule's target as an address block; a domain is an error.
func prefix(target string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(target); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	if p, err := netip.ParsePrefix(target); err == nil {
		return p.Masked(), nil
	}
	return netip.Prefix{}, fmt.Errorf("networkPolicy target %q: %w", target, ErrDomainRules)
}

// CheckAddressPolicy implements runtime.AddressPolicies: pol is enforced
// if it maps onto a NetworkPolicy (address rules only).
func (k *Kubernetes) CheckAddressPolicy(pol egress.Policy) error {
	_, err := egressRules(pol)
	return err
}

// createPolicy creates the NetworkPolicy of pod (not yet created) for pol.
func (k *Kubernetes) createPolicy(ctx context.Context, pod *corev1.Pod, pol *egress.Policy) (*networkingv1.NetworkPolicy, error) {
	np, err := networkPolicy(pod, pol)
	if err != nil {
		return nil, err
	}
	cctx, cancel := k.call(ctx)
	defer cancel()
	created, err := k.cs.NetworkingV1().NetworkPolicies(k.opts.Namespace).Create(cctx, np, metav1.CreateOptions{})
	return created, wrap(err, "create network policy %s", np.Name)
}

// ownPolicy makes pod the owner of np, so that the garbage collector
// deletes np with it.
func (k *Kubernetes) ownPolicy(ctx context.Context, np *networkingv1.NetworkPolicy, pod *corev1.Pod) error {
	yes := true
	np = np.DeepCopy()
	np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &yes}}
	cctx, cancel := k.call(ctx)
	defer cancel()
	_, err := k.cs.NetworkingV1().NetworkPolicies(k.opts.Namespace).Update(cctx, np, metav1.UpdateOptions{})
	return wrap(err, "own network policy %s", np.Name)
}

// deletePolicy deletes the NetworkPolicy of a pod, if it has one.
func (k *Kubernetes) deletePolicy(ctx context.Context, name string) {
	cctx, cancel := k.call(ctx)
	defer cancel()
	err := k.cs.NetworkingV1().NetworkPolicies(k.opts.Namespace).Delete(cctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		k.log.Warn("delete network policy", "name", name, "err", err)
	}
}

// labelNetwork puts a pod on an isolated network (EnsureIsolatedNetwork).
const labelNetwork = "opensandbox.io/sandboxd-network"

// isolatedPolicy is the NetworkPolicy of isolated network name: its pods
// take no connection from anyone (other sandboxes included; sandboxd
// reaches them over exec), and reach out freely.
func isolatedPolicy(name, namespace string, labels map[string]string) *networkingv1.NetworkPolicy {
	l := map[string]string{labelManagedBy: managedBy}
	for k, v := range labels {
		if validLabel(k, v) {
			l[k] = v
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxd-network-" + name, Namespace: namespace, Labels: l},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelNetwork: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// EnsureIsolatedNetwork implements runtime.IsolatedNetworks with a
// NetworkPolicy that denies all ingress to the network's pods. It holds
// only where the cluster's network plugin enforces NetworkPolicies.
func (k *Kubernetes) EnsureIsolatedNetwork(ctx context.Context, name string, labels map[string]string) error {
	want := isolatedPolicy(name, k.opts.Namespace, labels)
	cctx, cancel := k.call(ctx)
	defer cancel()
	policies := k.cs.NetworkingV1().NetworkPolicies(k.opts.Namespace)
	_, err := policies.Create(cctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return wrap(err, "create network policy %s", want.Name)
	}
	got, err := policies.Get(cctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return wrap(err, "network policy %s", want.Name)
	}
	if len(got.Spec.Ingress) > 0 || !slices.Contains(got.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) ||
		got.Spec.PodSelector.MatchLabels[labelNetwork] != name {
		return fmt.Errorf("network policy %s exists but lets pods connect to the network's sandboxes; delete it or fix it", want.Name)
	}
	return nil
}
