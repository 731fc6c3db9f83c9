//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The Kubernetes runtime against a real cluster (e2e/k8s/up.sh): sandboxd
// runs here with [runtime] type = "kubernetes", each test in a namespace of
// its own, reaching pods only through the API server (exec), never their IPs.
//
//	SANDBOXD_E2E_KUBECONFIG             the cluster's kubeconfig; unset: skip
//	SANDBOXD_E2E_REQUIRE_KUBERNETES=1   fail instead of skipping
//	SANDBOXD_E2E_K8S_AGENT_IMAGE        the sandboxd image of this tree
//	                                    (default localhost/sandboxd:e2e)

// kubeCluster is the cluster of one test: a client and a fresh namespace,
// deleted (with every pod in it) when the test ends.
type kubeCluster struct {
	kubeconfig, namespace, agentImage string
	cs                                kubernetes.Interface
}

func kubeClusterOrSkip(t *testing.T) *kubeCluster {
	t.Helper()
	kc := os.Getenv("SANDBOXD_E2E_KUBECONFIG")
	if kc == "" {
		if os.Getenv("SANDBOXD_E2E_REQUIRE_KUBERNETES") == "1" {
			t.Fatal("SANDBOXD_E2E_REQUIRE_KUBERNETES=1 but SANDBOXD_E2E_KUBECONFIG is unset: bring a cluster up with e2e/k8s/up.sh")
		}
		t.Skip("no Kubernetes cluster: set SANDBOXD_E2E_KUBECONFIG (e2e/k8s/up.sh writes it to its env file)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeCluster{kubeconfig: kc, cs: cs, namespace: "e2e-" + randomHex(t, 5),
		agentImage: cmpOr(os.Getenv("SANDBOXD_E2E_K8S_AGENT_IMAGE"), "localhost/sandboxd:e2e")}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k.namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		cs.CoreV1().Pods(k.namespace).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		cs.CoreV1().Namespaces().Delete(context.Background(), k.namespace, metav1.DeleteOptions{})
	})
	// Pods are admitted once the controller-manager has made the
	// namespace's default ServiceAccount.
	waitUntil(t, time.Minute, "the default ServiceAccount of "+k.namespace, func() bool {
		_, err := cs.CoreV1().ServiceAccounts(k.namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	return k
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// server starts sandboxd on the cluster's namespace. Its instance id is the
// cluster's (a Secret in the namespace), shared by every replica there.
func (k *kubeCluster) server(t *testing.T, opts ...serverOption) *Server {
	t.Helper()
	base := withTOML(fmt.Sprintf(`
[lifecycle]
instance_id = ""
[runtime]
type = "kubernetes"
[kubernetes]
kubeconfig_path = %q
namespace = %q
agent_image = %q
image_pull_policy = "IfNotPresent"
`, k.kubeconfig, k.namespace, k.agentImage))
	return startServer(t, append([]serverOption{base}, opts...)...)
}

// pods returns the names of the namespace's pods carrying selector.
func (k *kubeCluster) pods(t testing.TB, selector string) []string {
	t.Helper()
	list, err := k.cs.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	return names
}

func (k *kubeCluster) pod(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	p, err := k.cs.CoreV1().Pods(k.namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A sandbox is a hardened pod; commands, files and a PTY reach it over the
// agent's exec stream; deleting it deletes the pod.
func TestKubernetesSandbox(t *testing.T) {
	k := kubeClusterOrSkip(t)
	s := k.server(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"metadata": map[string]string{"team": "k8s-e2e"}}))
	if sb.Status.State != "Running" {
		t.Fatalf("created sandbox is %s, want Running", sb.Status.State)
	}
	pods := k.pods(t, "opensandbox.io/id="+sb.ID)
	if len(pods) != 1 {
		t.Fatalf("pods of sandbox %s: %v, want one", sb.ID, pods)
	}
	pod := k.pod(t, pods[0])
	sc := pod.Spec.Containers[0].SecurityContext
	if *pod.Spec.AutomountServiceAccountToken || *sc.Privileged || *sc.AllowPrivilegeEscalation ||
		pod.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod %s is not hardened: %+v / %+v", pod.Name, pod.Spec.SecurityContext, sc)
	}
	if got := pod.Labels["opensandbox.io/sandboxd-instance"]; got == "" {
		t.Error("pod has no instance label")
	}

	// Root in the sandbox has the documented set: CHOWN, DAC_OVERRIDE,
	// FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE.
	if out := runCommand(t, s, sb.ID, "echo k8s-$((6*7)); grep CapEff /proc/self/status"); out != "k8s-42\nCapEff:\t00000000000005fb" {
		t.Errorf("command output %q, want k8s-42 and the capability mask 5fb", out)
	}
	uploadFile(t, s, sb.ID, "/tmp/up.txt", "hello pod\n")
	if got := downloadFile(t, s, sb.ID, "/tmp/up.txt"); got != "hello pod\n" {
		t.Errorf("downloaded %q", got)
	}
	if got := runCommand(t, s, sb.ID, "cat /tmp/up.txt"); got != "hello pod" {
		t.Errorf("uploaded file reads %q in the pod", got)
	}
	// The agent is read-only in the sandbox.
	if out := runCommand(t, s, sb.ID, "touch /opt/sandboxd/x 2>&1 || echo refused"); !strings.Contains(out, "refused") {
		t.Errorf("the agent volume is writable: %q", out)
	}

	got := getSandbox(t, s, "/v1", sb.ID)
	if got.Metadata["team"] != "k8s-e2e" {
		t.Errorf("metadata %v", got.Metadata)
	}
	if status, _, body := s.do(t, http.MethodPost, sandboxPath(sb.ID, "/pause"), nil, nil); status < 400 {
		t.Errorf("pause answered %d %s, want a refusal", status, body)
	} else {
		t.Logf("pause: %d %s", status, body)
	}

	if status, _, body := s.do(t, http.MethodDelete, sandboxPath(sb.ID), nil, nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	status, _, body := s.do(t, http.MethodGet, sandboxPath(sb.ID), nil, nil)
	wantError(t, "GET deleted sandbox", status, body, http.StatusNotFound, "KUBERNETES::SANDBOX_NOT_FOUND")
	if _, err := k.cs.CoreV1().Pods(k.namespace).Get(context.Background(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		waitUntil(t, time.Minute, "pod "+pod.Name+" to go", func() bool {
			_, err := k.cs.CoreV1().Pods(k.namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	}
}

// The PTY of execd works over the pod's exec stream.
func TestKubernetesPTY(t *testing.T) {
	k := kubeClusterOrSkip(t)
	s := k.server(t)
	b := newExecdBox(t, s, busyboxRequest())
	testPTY(t, b)
}

// An expired sandbox's pod is reaped.
func TestKubernetesExpiry(t *testing.T) {
	k := kubeClusterOrSkip(t)
	s := k.server(t)
	sb := createSandbox(t, s, "/v1/sandboxes", busyboxWith(map[string]any{"timeout": 60}))
	waitExpired(t, s, sb.ID, parseUTC(t, "expiresAt", sb.ExpiresAt))
	waitUntil(t, time.Minute, "the expired sandbox's pod to go", func() bool {
		return len(k.pods(t, "opensandbox.io/id="+sb.ID)) == 0
	})
}

// A warm pool is pre-created pods; a create that matches takes one.
func TestKubernetesPool(t *testing.T) {
	k := kubeClusterOrSkip(t)
	s := k.server(t, withTOML(fmt.Sprintf(`[[pool]]
name = "warm"
image = %q
size = 1
entrypoint = ["tail", "-f", "/dev/null"]
resource_limits = { cpu = "1", memory = "512Mi" }
`, imageBusybox)))
	waitPool(t, s, "warm", 1)
	members := k.pods(t, "opensandbox.io/sandboxd-pool=warm")
	if len(members) != 1 {
		t.Fatalf("pool pods %v, want one", members)
	}
	sb := createSandbox(t, s, "/v1/sandboxes", map[string]any{"extensions": map[string]string{"poolRef": "warm"}, "timeout": 600})
	if members[0] != "sandbox-"+sb.ID {
		t.Errorf("sandbox %s is not the pool's pod %s", sb.ID, members[0])
	}
	if got := runCommand(t, s, sb.ID, "echo from-pool"); got != "from-pool" {
		t.Errorf("pool sandbox command output %q", got)
	}
	// The pod taken keeps its pool label; the refill is a second one.
	waitPool(t, s, "warm", 1)
	if pods := k.pods(t, "opensandbox.io/sandboxd-pool=warm"); len(pods) != 2 {
		t.Errorf("pool pods after the refill: %v, want the taken one and a new one", pods)
	}
}

// The official TypeScript SDK works unchanged against pods.
func TestKubernetesSDK(t *testing.T) {
	k := kubeClusterOrSkip(t)
	s := k.server(t)
	s.runNode(t, "sdk_smoke.test.mjs", nil)
	s.runNode(t, "kubernetes_sdk.test.mjs", nil)
}

// Two replicas share one namespace: both serve every sandbox (records live
// on the pods), one leads (the Lease); when the leader is killed, the other
// takes the Lease over and reaps what expires.
func TestKubernetesReplicaTakeover(t *testing.T) {
	k := kubeClusterOrSkip(t)
	a := k.server(t)
	b := k.server(t)
	sb := createSandbox(t, a, "/v1/sandboxes", busyboxWith(map[string]any{"timeout": 60}))
	if got := getSandbox(t, b, "/v1", sb.ID); got.Status.State != "Running" {
		t.Fatalf("the other replica sees sandbox %s as %q, want Running", sb.ID, got.Status.State)
	}
	if out := runCommand(t, b, sb.ID, "echo via-b"); out != "via-b" {
		t.Errorf("command through the other replica: %q", out)
	}
	lease, err := k.cs.CoordinationV1().Leases(k.namespace).Get(context.Background(), "sandboxd-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := *lease.Spec.HolderIdentity
	a.Kill9() // the Lease is not released: b waits for it to expire
	waitExpired(t, b, sb.ID, parseUTC(t, "expiresAt", sb.ExpiresAt))
	lease, err = k.cs.CoordinationV1().Leases(k.namespace).Get(context.Background(), "sandboxd-leader", metav1.GetOptions{})
	if err != nil || *lease.Spec.HolderIdentity == first {
		t.Errorf("lease held by %v (%v), want the second replica, not %s", lease.Spec.HolderIdentity, err, first)
	}
	waitUntil(t, time.Minute, "the expired sandbox's pod to go", func() bool {
		return len(k.pods(t, "opensandbox.io/id="+sb.ID)) == 0
	})
}

// A networkPolicy of CIDR rules becomes the sandbox's NetworkPolicy; a
// domain rule is a 400 naming the Docker runtime's helper; the egress API
// is not there (501). This cluster's bridge CNI does not enforce
// NetworkPolicies, so only the object is checked, not the traffic.
func TestKubernetesEgressPolicy(t *testing.T) {
	k := kubeClusterOrSkip(t)
	s := k.server(t)
	policy := func(target string) map[string]any {
		return busyboxWith(map[string]any{"networkPolicy": map[string]any{
			"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": target}},
		}})
	}
	sb := createSandbox(t, s, "/v1/sandboxes", policy("10.0.0.0/8"))
	pods := k.pods(t, "opensandbox.io/id="+sb.ID)
	if len(pods) != 1 {
		t.Fatalf("pods of sandbox %s: %v, want one", sb.ID, pods)
	}
	np, err := k.cs.NetworkingV1().NetworkPolicies(k.namespace).Get(context.Background(), pods[0], metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no NetworkPolicy for the policed sandbox: %v", err)
	}
	if e := np.Spec.Egress; len(e) != 1 || len(e[0].To) != 1 || e[0].To[0].IPBlock == nil || e[0].To[0].IPBlock.CIDR != "10.0.0.0/8" {
		t.Errorf("NetworkPolicy egress %+v, want 10.0.0.0/8 only", np.Spec.Egress)
	}
	var ep struct{ Headers map[string]string }
	s.doJSON(t, http.MethodGet, sandboxPath(sb.ID, "/endpoints/18080"), nil, http.StatusOK, &ep)
	if status, _, body := s.do(t, http.MethodGet, "/sandboxes/"+sb.ID+"/proxy/18080/policy", nil, ep.Headers); status != http.StatusNotImplemented {
		t.Errorf("GET /policy: %d %s, want 501", status, body)
	}

	status, _, body := s.do(t, http.MethodPost, "/v1/sandboxes", policy("pypi.org"), nil)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "Docker runtime's egress helper") {
		t.Errorf("domain rule: %d %s, want a 400 naming the Docker runtime's helper", status, body)
	}
}
