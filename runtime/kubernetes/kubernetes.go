// Package kubernetes implements runtime.Runtime on a Kubernetes cluster with
// client-go: a sandbox is a pod, its agent is reached over pods/exec (the
// same yamux session the Docker runtime carries over exec attach), and what
// sandboxd knows about a sandbox is kept on its pod, so several replicas
// can serve one namespace. It is the only package that imports client-go.
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
)

// ErrNotSupported is what this runtime answers where a pod has no
// equivalent.
var ErrNotSupported = errors.New("not supported on the Kubernetes runtime")

// Options configure the Kubernetes runtime.
type Options struct {
	// Kubeconfig is a kubeconfig file; "" = $KUBECONFIG, else the
	// in-cluster config. Context picks one of its contexts.
	Kubeconfig string
	Context    string
	Namespace  string
	// ServiceAccount, RuntimeClassName, NodeSelector, Tolerations and
	// ImagePullSecrets go into every sandbox pod as they are.
	ServiceAccount   string
	RuntimeClassName string
	NodeSelector     map[string]string
	Tolerations      []corev1.Toleration
	ImagePullSecrets []string
	// AgentImage is the sandboxd image whose init container copies the
	// agent into each pod.
	AgentImage      string
	ImagePullPolicy corev1.PullPolicy
	// DefaultCPURequest and DefaultMemoryRequest are reserved for a
	// sandbox that asks for no requests.
	DefaultCPURequest    resource.Quantity
	DefaultMemoryRequest resource.Quantity
	// APITimeout bounds each non-streaming API call.
	APITimeout time.Duration
	// LeaseName is the Lease one replica at a time holds (Lead), as
	// Identity, unique per replica; LeaseTiming zero is DefaultTiming.
	LeaseName   string
	Identity    string
	LeaseTiming Timing
	Logger      *slog.Logger
}

// Kubernetes drives sandboxes as pods.
type Kubernetes struct {
	cs       kubernetes.Interface
	rest     *rest.Config
	opts     Options
	log      *slog.Logger
	sessions *agent.Sessions
	// dial opens the agent's stdin/stdout in pod (execAgent); tests
	// replace it where there is no kubelet.
	dial func(ctx context.Context, pod string, stderr io.Writer) (io.ReadWriteCloser, error)
}

var _ runtime.Runtime = (*Kubernetes)(nil)

// Features implements runtime.Runtime.
func (k *Kubernetes) Features() runtime.Features {
	return runtime.Features{
		Volumes: k, Records: k, Leadership: k, IsolatedNetworks: k, AddressPolicies: k,
	}
}

// RestConfig loads the client configuration: the kubeconfig file if one is
// named or $KUBECONFIG is set, else the in-cluster config (the pod's
// service account).
func RestConfig(kubeconfig, context string) (*rest.Config, error) {
	if kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: no kubeconfig_path, no $KUBECONFIG, and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: load kubeconfig: %w", err)
	}
	return cfg, nil
}

// Client-side rate limit of API calls where the kubeconfig sets none.
// client-go's default (5 per second, bursts of 10) made every proxied
// request past the burst wait ~200 ms: each one reads its sandbox's record
// from the pod. kubectl's figures; the API server's priority and fairness
// is the real guard.
const (
	clientQPS   = 50
	clientBurst = 300
)

// New connects to the cluster cfg describes.
func New(cfg *rest.Config, opts Options) (*Kubernetes, error) {
	if opts.Namespace == "" || opts.LeaseName == "" || opts.Identity == "" || opts.AgentImage == "" {
		return nil, errors.New("kubernetes: namespace, lease name, identity and agent image are required")
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg.QPS, cfg.Burst = clientQPS, clientBurst
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	k := newWithClient(cs, opts)
	k.rest = cfg
	k.dial = k.execAgent
	return k, nil
}

func newWithClient(cs kubernetes.Interface, opts Options) *Kubernetes {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.APITimeout <= 0 {
		opts.APITimeout = 60 * time.Second
	}
	return &Kubernetes{cs: cs, opts: opts, log: opts.Logger, sessions: agent.NewSessions()}
}

// Clientset is the client, for the Lease elector.
func (k *Kubernetes) Clientset() kubernetes.Interface { return k.cs }

// Namespace is where the sandbox pods live.
func (k *Kubernetes) Namespace() string { return k.opts.Namespace }

func (k *Kubernetes) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, k.opts.APITimeout)
}

func (k *Kubernetes) pods() podClient { return k.cs.CoreV1().Pods(k.opts.Namespace) }

type podClient = interface {
	Create(context.Context, *corev1.Pod, metav1.CreateOptions) (*corev1.Pod, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
	List(context.Context, metav1.ListOptions) (*corev1.PodList, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	GetLogs(string, *corev1.PodLogOptions) *rest.Request
}

// wrap maps API errors onto the runtime's.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf(format, args...)
	var ne net.Error
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w: %v", what, runtime.ErrNotFound, err)
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return fmt.Errorf("%s: %w: %v", what, runtime.ErrConflict, err)
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return fmt.Errorf("%s: %w: %v", what, runtime.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Name implements runtime.Runtime: codes are KUBERNETES::..., as upstream's.
func (k *Kubernetes) Name() string { return "kubernetes" }

// Ping implements runtime.Runtime: the API server answers and the
// namespace exists.
func (k *Kubernetes) Ping(ctx context.Context) error {
	cctx, cancel := k.call(ctx)
	defer cancel()
	_, err := k.cs.CoreV1().Namespaces().Get(cctx, k.opts.Namespace, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		// The Role grants pods, not namespaces: being told so is an answer.
		return nil
	}
	return wrap(err, "namespace %s", k.opts.Namespace)
}

// Create implements runtime.Runtime. The pod is created (and scheduled)
// at once; Start waits for it to run. A sandbox without network gets its
// deny-all NetworkPolicy first, and one with an egress policy that policy's
// (AddressPolicies), so it never runs without it.
func (k *Kubernetes) Create(ctx context.Context, spec runtime.Spec) (string, error) {
	pod, err := buildPod(spec, &k.opts)
	if err != nil {
		return "", err
	}
	var np *networkingv1.NetworkPolicy
	switch spec.Network.Mode {
	case runtime.NetworkDefault:
	case runtime.NetworkIsolated:
		pod.Labels[labelNetwork] = spec.Network.Name // selected by its policy
	case runtime.NetworkNone:
		if np, err = k.createPolicy(ctx, pod, nil); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("network %q: %w (pods join the cluster's pod network)", spec.Network.Name, ErrNotSupported)
	}
	if pol := spec.Network.Policy; pol != nil && np == nil {
		if np, err = k.createPolicy(ctx, pod, pol); err != nil {
			return "", err
		}
	}
	cctx, cancel := k.call(ctx)
	defer cancel()
	created, err := k.pods().Create(cctx, pod, metav1.CreateOptions{})
	if err != nil {
		if np != nil {
			k.deletePolicy(context.Background(), np.Name)
		}
		return "", wrap(err, "create pod %s", spec.Name)
	}
	if np != nil {
		if err := k.ownPolicy(ctx, np, created); err != nil {
			k.Remove(context.Background(), created.Name)
			return "", err
		}
	}
	return created.Name, nil
}

// startTimeout bounds the wait for a pod to run: scheduling, pulls and the
// agent's init container.
const startTimeout = 5 * time.Minute

// Start implements runtime.Runtime: it waits until the sandbox container
// runs, and fails at once when it cannot (an image that cannot be pulled,
// a container that exited).
func (k *Kubernetes) Start(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		pod, err := k.pods().Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return wrap(err, "start pod %s", id)
		}
		if done, err := started(pod); done {
			return err
		}
		w, err := k.pods().Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", id).String(), ResourceVersion: pod.ResourceVersion,
		})
		if err != nil {
			return wrap(err, "watch pod %s", id)
		}
		err = waitStarted(ctx, w)
		w.Stop()
		if !errors.Is(err, errWatchEnded) {
			return wrap(err, "start pod %s", id)
		}
	}
}

var errWatchEnded = errors.New("watch ended")

func waitStarted(ctx context.Context, w watch.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errWatchEnded
			}
			if ev.Type == watch.Deleted {
				return fmt.Errorf("%w: the pod was deleted while starting", runtime.ErrNotFound)
			}
			if pod, isPod := ev.Object.(*corev1.Pod); isPod {
				if done, err := started(pod); done {
					return err
				}
			}
		}
	}
}

// Waiting reasons after which a container will not start without a change.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// started reports whether pod's start is settled, and how.
func started(pod *corev1.Pod) (bool, error) {
	for _, set := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range set {
			if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
				return true, fmt.Errorf("container %s of pod %s: %s: %s", cs.Name, pod.Name, w.Reason, w.Message)
			}
			if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || cs.Name == sandboxContainer) {
				return true, fmt.Errorf("container %s of pod %s exited with %d (%s) %s", cs.Name, pod.Name, t.ExitCode, t.Reason, t.Message)
			}
		}
	}
	if c := sandboxStatus(pod); c != nil && c.State.Running != nil {
		return true, nil
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return true, fmt.Errorf("pod %s ended (%s) before it ran: %s", pod.Name, pod.Status.Phase, pod.Status.Message)
	}
	return false, nil
}

func sandboxStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == sandboxContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Inspect implements runtime.Runtime.
func (k *Kubernetes) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	cctx, cancel := k.call(ctx)
	defer cancel()
	pod, err := k.pods().Get(cctx, id, metav1.GetOptions{})
	if err != nil {
		return runtime.Container{}, wrap(err, "inspect pod %s", id)
	}
	return podContainer(pod), nil
}

// podContainer is the runtime's view of a pod.
func podContainer(pod *corev1.Pod) runtime.Container {
	c := runtime.Container{
		ID: pod.Name, Name: pod.Name, Labels: specLabels(pod),
		Created: pod.CreationTimestamp.Time, State: runtime.StateCreated,
	}
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == sandboxContainer {
			c.Image, c.Cmd = ctr.Image, ctr.Command
		}
	}
	if st := sandboxStatus(pod); st != nil {
		switch s := st.State; {
		case s.Running != nil:
			c.State, c.StartedAt = runtime.StateRunning, s.Running.StartedAt.Time
		case s.Terminated != nil:
			c.State, c.ExitCode = runtime.StateExited, int(s.Terminated.ExitCode)
			c.StartedAt, c.FinishedAt = s.Terminated.StartedAt.Time, s.Terminated.FinishedAt.Time
			c.OOMKilled = s.Terminated.Reason == "OOMKilled"
		case s.Waiting != nil && fatalWaiting[s.Waiting.Reason]:
			c.Error = s.Waiting.Reason + ": " + s.Waiting.Message
		}
	}
	if pod.Status.Phase == corev1.PodFailed && c.State != runtime.StateExited {
		// Evicted, or its node lost: the pod will not run again.
		c.State, c.Error = runtime.StateDead, pod.Status.Reason+": "+pod.Status.Message
	}
	if pod.DeletionTimestamp != nil {
		c.State = runtime.StateRemoving
	}
	return c
}

// specLabels returns the labels the pod was created with (annotationLabels),
// falling back to its pod labels.
func specLabels(pod *corev1.Pod) map[string]string {
	var l map[string]string
	if err := json.Unmarshal([]byte(pod.Annotations[annotationLabels]), &l); err != nil || l == nil {
		l = map[string]string{}
		for k, v := range pod.Labels {
			if k != labelPod && k != labelManagedBy {
				l[k] = v
			}
		}
	}
	return l
}

// List implements runtime.Runtime.
func (k *Kubernetes) List(ctx context.Context, want map[string]string) ([]runtime.Container, error) {
	pods, err := k.listPods(ctx, want)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Container, 0, len(pods))
	for i := range pods {
		out = append(out, podContainer(&pods[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// selector selects sandboxd's pods by the wanted labels that are valid pod
// labels; the others are matched on the stored labels (listPods).
func selector(want map[string]string) string {
	sel := labels.NewSelector()
	req, _ := labels.NewRequirement(labelManagedBy, selection.Equals, []string{managedBy})
	sel = sel.Add(*req)
	for key, v := range want {
		// A label asked for with any value may be stored only in
		// annotationLabels (its value is no label value).
		if v != "" && validLabel(key, v) {
			r, _ := labels.NewRequirement(key, selection.Equals, []string{v})
			sel = sel.Add(*r)
		}
	}
	return sel.String()
}

func matches(have, want map[string]string) bool {
	for key, v := range want {
		got, ok := have[key]
		if !ok || (v != "" && got != v) {
			return false
		}
	}
	return true
}

// Remove implements runtime.Runtime: the pod is deleted at once (no grace:
// sandboxes are killed, as on Docker); the garbage collector would delete
// its NetworkPolicy too (owner reference), but a create cut short may have
// left one without.
func (k *Kubernetes) Remove(ctx context.Context, id string) error {
	k.sessions.Drop(id)
	cctx, cancel := k.call(ctx)
	defer cancel()
	zero := int64(0)
	err := k.pods().Delete(cctx, id, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	k.deletePolicy(ctx, id)
	return wrap(err, "delete pod %s", id)
}

// Logs implements runtime.Runtime.
func (k *Kubernetes) Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error) {
	o := &corev1.PodLogOptions{Container: sandboxContainer}
	if tail > 0 {
		t := int64(tail)
		o.TailLines = &t
	}
	if !since.IsZero() {
		o.SinceTime = &metav1.Time{Time: since}
	}
	rc, err := k.pods().GetLogs(id, o).Stream(ctx)
	return rc, wrap(err, "logs of pod %s", id)
}

// Agent implements runtime.Runtime: one exec stream per pod carries the
// agent's yamux session, started on first use and again when it ended.
func (k *Kubernetes) Agent(ctx context.Context, id string) (http.RoundTripper, error) {
	client, err := k.sessions.Get(ctx, id, func(ctx context.Context) (*agent.Client, error) { return k.startAgent(ctx, id) })
	if err != nil {
		return nil, err
	}
	return client.Transport(), nil
}

// EnsureVolume implements runtime.Volumes with PersistentVolumeClaims: an
// existing claim is used; sandboxd creates none (that needs a storage
// class and a size the API does not carry).
func (k *Kubernetes) EnsureVolume(ctx context.Context, name string, create bool, _ map[string]string) (bool, map[string]string, error) {
	cctx, cancel := k.call(ctx)
	defer cancel()
	pvc, err := k.cs.CoreV1().PersistentVolumeClaims(k.opts.Namespace).Get(cctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && create {
		return false, nil, fmt.Errorf("create volume %s: %w (create a PersistentVolumeClaim of that name)", name, ErrNotSupported)
	}
	if err != nil {
		return false, nil, wrap(err, "volume %s", name)
	}
	return false, pvc.Labels, nil
}

// RemoveVolume implements runtime.Volumes. sandboxd never created the
// claim (EnsureVolume), so it is not sandboxd's to remove.
func (k *Kubernetes) RemoveVolume(context.Context, string) error {
	return fmt.Errorf("remove volume: %w", ErrNotSupported)
}

// Close implements runtime.Runtime.
func (k *Kubernetes) Close() error {
	k.sessions.Close()
	return nil
}
