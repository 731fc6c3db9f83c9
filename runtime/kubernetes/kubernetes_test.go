//go:build linux

package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
)

// The pod of a sandbox carries Docker's hardening: nothing privileged, the
// capability set asked, no privilege escalation, RuntimeDefault seccomp,
// no service-account token, limits, and the agent mounted read-only.
func TestBuildPodHardening(t *testing.T) {
	o := testOptions()
	pod, err := buildPod(hardenedSpec(), &o)
	if err != nil {
		t.Fatal(err)
	}
	ps := pod.Spec
	if *ps.AutomountServiceAccountToken || *ps.EnableServiceLinks || !*ps.ShareProcessNamespace || ps.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod spec: token %v, service links %v, shared pid ns %v, restart %s",
			*ps.AutomountServiceAccountToken, *ps.EnableServiceLinks, *ps.ShareProcessNamespace, ps.RestartPolicy)
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Error("pod shares a host namespace")
	}
	psc := ps.SecurityContext
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp %v, want RuntimeDefault", psc.SeccompProfile)
	}
	if *psc.RunAsUser != 1000 || *psc.RunAsGroup != 1001 || !*psc.RunAsNonRoot {
		t.Errorf("user %d:%d nonRoot %v, want 1000:1001 non-root", *psc.RunAsUser, *psc.RunAsGroup, *psc.RunAsNonRoot)
	}
	c := ps.Containers[0]
	sc := c.SecurityContext
	if *sc.Privileged || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container: privileged %v, escalation %v, read-only root %v", *sc.Privileged, *sc.AllowPrivilegeEscalation, *sc.ReadOnlyRootFilesystem)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN", "KILL"}) {
		t.Errorf("capabilities %+v, want drop ALL add CHOWN KILL", sc.Capabilities)
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 500 {
		t.Errorf("cpu limit %dm, want 500m", got)
	}
	if got := c.Resources.Limits.Memory().Value(); got != 64<<20 {
		t.Errorf("memory limit %d, want 64Mi", got)
	}
	// The default memory request (128Mi) is above the limit: capped.
	if c.Resources.Requests.Memory().Value() != 64<<20 || c.Resources.Requests.Cpu().MilliValue() != 100 {
		t.Errorf("requests %v, want cpu 100m and memory capped at the limit", c.Resources.Requests)
	}
	if !slices.Equal(c.Command, []string{"sleep", "infinity"}) || len(c.Args) != 0 {
		t.Errorf("command %q args %q", c.Command, c.Args)
	}
	if len(c.Env) != 2 || c.Env[1].Name != "B" || c.Env[1].Value != "x=y" {
		t.Errorf("env %+v", c.Env)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts[AgentDir]; !ok || !m.ReadOnly {
		t.Errorf("agent mount %+v, want %s read-only", m, AgentDir)
	}
	if _, ok := mounts["/tmp"]; !ok {
		t.Error("no /tmp for the read-only root")
	}
	for _, v := range ps.Volumes {
		if v.Name == mounts["/tmp"].Name && (v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit.Value() != 256<<20) {
			t.Errorf("/tmp volume %+v, want 256Mi in memory", v.EmptyDir)
		}
	}
	ic := ps.InitContainers[0]
	isc := ic.SecurityContext
	if ic.Image != "sandboxd:test" || !slices.Equal(ic.Command, []string{"/sandboxd", "install-agent", AgentDir}) ||
		*isc.RunAsUser == 0 || !*isc.RunAsNonRoot || !*isc.ReadOnlyRootFilesystem || *isc.AllowPrivilegeEscalation ||
		!slices.Equal(isc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("init container %+v with %+v", ic, isc)
	}
	if pod.Labels["opensandbox.io/id"] != "1" || pod.Labels[labelPod] != "sandbox-1" {
		t.Errorf("labels %v", pod.Labels)
	}
	if _, ok := pod.Labels["opensandbox.io/expires-at"]; ok {
		t.Error("an invalid label value became a pod label")
	}
	if got := specLabels(pod); got["opensandbox.io/expires-at"] != "2026-12-01T10:00:00.5Z" || got["team"] != "a b" || len(got) != 3 {
		t.Errorf("stored labels %v", got)
	}
}

func TestBuildPodRefuses(t *testing.T) {
	o := testOptions()
	for name, mutate := range map[string]func(*runtime.Spec){
		"host mount": func(s *runtime.Spec) {
			s.Mounts = []runtime.Mount{{Kind: runtime.MountHost, Source: "/srv", Target: "/data"}}
		},
		"named user":     func(s *runtime.Spec) { s.User = "sandbox" },
		"seccomp path":   func(s *runtime.Spec) { s.SeccompProfile = "/etc/seccomp.json" },
		"all gpus":       func(s *runtime.Spec) { s.Resources.GPUs = -1 },
		"not a pod name": func(s *runtime.Spec) { s.Name = "Sandbox_1" },
	} {
		t.Run(name, func(t *testing.T) {
			spec := hardenedSpec()
			mutate(&spec)
			if pod, err := buildPod(spec, &o); err == nil {
				t.Errorf("built %s", pod.Name)
			}
		})
	}
	spec := hardenedSpec()
	spec.Mounts = []runtime.Mount{{Kind: runtime.MountHost, Source: "/srv", Target: "/data"}}
	_, err := buildPod(spec, &o)
	var me *runtime.MountError
	if !errors.As(err, &me) || me.Target != "/data" {
		t.Errorf("host mount error %v, want a MountError for /data", err)
	}
	spec = hardenedSpec()
	spec.UserNamespaces, spec.User = true, "1000:1000"
	if _, err := buildPod(spec, &o); !errors.Is(err, runtime.ErrUnsupported) {
		t.Errorf("user namespaces: %v, want ErrUnsupported (lifecycle answers 400)", err)
	}
}

// runningOnCreate makes the fake API server report every created pod as
// running, as a kubelet would.
func runningOnCreate(cs *fake.Clientset) {
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		// The API server stamps every object; without it a leader's reaper
		// takes a pod whose create is finishing for one left long ago.
		pod.CreationTimestamp = metav1.Now()
		if pod.Spec.Containers[0].Image == "missing" {
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sandboxContainer,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}
			return false, nil, nil
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: sandboxContainer,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		return false, nil, nil
	})
}

// pipeAgent serves the agent in process on the far end of a pipe, in
// place of pods/exec.
func pipeAgent(dials *int) func(context.Context, string, io.Writer) (io.ReadWriteCloser, error) {
	return func(ctx context.Context, pod string, _ io.Writer) (io.ReadWriteCloser, error) {
		*dials++
		a, b := net.Pipe()
		go agent.Run(context.Background(), b, b, nil)
		return a, nil
	}
}

// fakeCluster is a runtime on the fake clientset whose pods run and whose
// agent is served in process; dials counts the agent's exec streams.
func fakeCluster() (cs *fake.Clientset, k *Kubernetes, dials *int) {
	cs = fake.NewClientset()
	runningOnCreate(cs)
	k = newWithClient(cs, testOptions())
	dials = new(int)
	k.dial = pipeAgent(dials)
	return cs, k, dials
}

// echo runs command through an agent transport and checks its output
// holds want.
func echo(t *testing.T, rt http.RoundTripper, command, want string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"command": command})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://agent/command", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(out), want) {
		t.Errorf("output of %q: %s, want %q in it", command, out, want)
	}
}

func TestSandboxLifeOnFakeCluster(t *testing.T) {
	cs, k, dials := fakeCluster()
	ctx := context.Background()

	spec := hardenedSpec()
	spec.Network = runtime.Network{Mode: runtime.NetworkNone}
	id, err := k.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	np, err := cs.NetworkingV1().NetworkPolicies("sandboxes").Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no NetworkPolicy for a sandbox without network: %v", err)
	}
	if len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 2 || len(np.OwnerReferences) != 1 {
		t.Errorf("policy %+v, want all traffic denied, owned by the pod", np.Spec)
	}
	c, err := k.Inspect(ctx, id)
	if err != nil || c.State != runtime.StateRunning || c.Image != "busybox" || c.Labels["team"] != "a b" {
		t.Fatalf("Inspect = %+v, %v", c, err)
	}
	// A label that is no pod label is matched on the stored labels.
	for _, tt := range []struct {
		want map[string]string
		n    int
	}{
		{map[string]string{"opensandbox.io/id": "1"}, 1},
		{map[string]string{"team": "a b"}, 1},
		{map[string]string{"team": "a c"}, 0},
		{map[string]string{"opensandbox.io/expires-at": ""}, 1},
		{map[string]string{"opensandbox.io/id": "2"}, 0},
	} {
		if list, err := k.List(ctx, tt.want); err != nil || len(list) != tt.n {
			t.Errorf("List(%v) = %d sandboxes, %v; want %d", tt.want, len(list), err, tt.n)
		}
	}

	rt, err := k.Agent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, rt, "echo in-fake-pod", "in-fake-pod")
	if _, err := k.Agent(ctx, id); err != nil || *dials != 1 {
		t.Errorf("second Agent: %v after %d execs, want the one stream reused", err, *dials)
	}

	if err := k.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Inspect after Remove = %v, want ErrNotFound", err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies("sandboxes").Get(ctx, id, metav1.GetOptions{}); err == nil {
		t.Error("NetworkPolicy left after Remove")
	}
	if err := k.Remove(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
}

func TestStartFailsOnAnImageThatCannotRun(t *testing.T) {
	cs := fake.NewClientset()
	runningOnCreate(cs)
	k := newWithClient(cs, testOptions())
	spec := hardenedSpec()
	spec.Image = "missing"
	id, err := k.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Start(ctx, id); err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Errorf("Start = %v, want the kubelet's reason", err)
	}
	if c, _ := k.Inspect(ctx, id); !strings.Contains(c.Error, "image not present") {
		t.Errorf("Inspect error %q, want the kubelet's message", c.Error)
	}
}

// enforceResourceVersion makes the fake API server refuse an update of a
// pod changed since it was read, as the real one does.
func enforceResourceVersion(cs *fake.Clientset) {
	cs.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		pod := a.(k8stesting.UpdateAction).GetObject().(*corev1.Pod)
		cur, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), pod.Namespace, pod.Name)
		if err != nil {
			return false, nil, nil
		}
		if cur.(*corev1.Pod).ResourceVersion != pod.ResourceVersion {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), pod.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(pod.ResourceVersion)
		pod.ResourceVersion = strconv.Itoa(n + 1)
		return false, nil, nil
	})
}

func TestRecordsOnPods(t *testing.T) {
	cs := fake.NewClientset()
	enforceResourceVersion(cs)
	k := newWithClient(cs, testOptions())
	ctx := context.Background()
	if err := k.PutRecord(ctx, "sandbox-1", []byte(`{}`)); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("PutRecord without a pod = %v, want ErrNotFound", err)
	}
	if _, err := k.Create(ctx, hardenedSpec()); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Record(ctx, "sandbox-1"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Record before any = %v, want ErrNotFound", err)
	}
	if err := k.PutRecord(ctx, "sandbox-1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := k.PutRecord(ctx, "sandbox-1", make([]byte, maxRecordBytes+1)); err == nil {
		t.Error("an oversized record was stored")
	}
	// Another replica's write between a read and the write is not lost:
	// the first update conflicts and runs again on the new record.
	calls := 0
	err := k.UpdateRecord(ctx, "sandbox-1", func(cur []byte) ([]byte, error) {
		calls++
		if calls == 1 {
			pod, _ := cs.CoreV1().Pods("sandboxes").Get(ctx, "sandbox-1", metav1.GetOptions{})
			pod.Annotations[annotationRecord] = `{"n":10}`
			if _, err := cs.CoreV1().Pods("sandboxes").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var r struct{ N int }
		json.Unmarshal(cur, &r)
		r.N++
		return json.Marshal(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := k.Record(ctx, "sandbox-1")
	if err != nil || string(rec) != `{"N":11}` || calls != 2 {
		t.Errorf("record %s after %d calls (%v), want {\"N\":11} after 2", rec, calls, err)
	}
	sentinel := errors.New("no thanks")
	if err := k.UpdateRecord(ctx, "sandbox-1", func([]byte) ([]byte, error) { return nil, sentinel }); err != sentinel {
		t.Errorf("UpdateRecord = %v, want fn's error as is", err)
	}
	all, err := k.Records(ctx, map[string]string{"team": "a b"})
	if err != nil || len(all) != 1 || string(all["sandbox-1"]) != `{"N":11}` {
		t.Errorf("Records = %q, %v", all, err)
	}

	s1, err := k.Secret(ctx, "token")
	if err != nil || len(s1) < 32 {
		t.Fatalf("Secret = %x, %v", s1, err)
	}
	other := newWithClient(cs, testOptions()) // a second replica
	if s2, err := other.Secret(ctx, "token"); err != nil || string(s2) != string(s1) {
		t.Errorf("second replica's secret differs (%v)", err)
	}
}

// One replica leads at a time; when it stops (its context ends, as at
// shutdown) the other takes over.
func TestLeadership(t *testing.T) {
	cs := fake.NewClientset()
	fast := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 10 * time.Millisecond}
	replica := func(id string, log slog.Handler) *Kubernetes {
		o := testOptions()
		o.Identity, o.LeaseTiming, o.Logger = id, fast, slog.New(log)
		return newWithClient(cs, o)
	}
	bSaw := make(leadersSeen, 16)
	a, b := replica("a", slog.DiscardHandler), replica("b", bSaw)
	actx, stopA := context.WithCancel(context.Background())
	defer stopA()
	leadA, err := a.Lead(actx)
	if err != nil {
		t.Fatal(err)
	}
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	gotB := make(chan context.Context, 1)
	go func() {
		lctx, _ := b.Lead(bctx)
		gotB <- lctx
	}()
	// b must first see a's Lease and not take it.
	select {
	case <-gotB:
		t.Fatal("b leads while a does")
	case id := <-bSaw:
		if id != "a" {
			t.Fatalf("b sees leader %q while a leads", id)
		}
	case <-time.After(time.Minute):
		t.Fatal("b never saw a's Lease")
	}
	select {
	case <-gotB:
		t.Fatal("b leads while a does")
	default:
	}
	stopA()
	<-leadA.Done()
	select {
	case lctx := <-gotB:
		if lctx == nil || lctx.Err() != nil {
			t.Fatal("b's leadership already over")
		}
	case <-time.After(time.Minute):
		t.Fatal("b did not take over")
	}
	lease, err := cs.CoordinationV1().Leases("sandboxes").Get(context.Background(), "sandboxd-leader", metav1.GetOptions{})
	if err != nil || *lease.Spec.HolderIdentity != "b" {
		t.Errorf("lease %+v, %v; want held by b", lease, err)
	}
}

// leadersSeen receives the leader of each "leader" record logged.
type leadersSeen chan string

func (c leadersSeen) Enabled(context.Context, slog.Level) bool { return true }
func (c leadersSeen) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c leadersSeen) WithGroup(string) slog.Handler            { return c }
func (c leadersSeen) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "leader" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "leader" {
			select {
			case c <- a.Value.String():
			default:
			}
		}
		return true
	})
	return nil
}

// The client's rate limit is not client-go's default of 5 calls a second,
// which throttled every proxied request past a burst of 10 to ~200 ms; a
// kubeconfig's own limit is kept.
func TestClientRateLimit(t *testing.T) {
	for _, tc := range []struct {
		qps, want float32
	}{{0, clientQPS}, {7, 7}} {
		k, err := New(&rest.Config{Host: "http://127.0.0.1:1", QPS: tc.qps, Burst: 20}, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		if got := k.cs.CoreV1().RESTClient().GetRateLimiter().QPS(); got != tc.want {
			t.Errorf("kubeconfig QPS %v: client QPS %v, want %v", tc.qps, got, tc.want)
		}
	}
}
