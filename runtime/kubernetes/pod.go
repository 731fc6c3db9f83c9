package kubernetes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandboxd/runtime"
)

// AgentDir is where the agent's emptyDir is mounted (read-only) in every
// sandbox container.
const AgentDir = "/opt/sandboxd"

const (
	agentPath = AgentDir + "/sandboxd"
	// sandboxContainer runs the sandbox's image; installContainer is the
	// init container that copies the agent into the emptyDir agentVolume.
	sandboxContainer = "sandbox"
	installContainer = "install-agent"
	agentVolume      = "sandboxd-agent"

	// annotationLabels holds every label of the spec, as JSON: label
	// values are limited to 63 characters of a small alphabet, which an
	// expiry time or a metadata value may not fit.
	annotationLabels = "opensandbox.io/sandboxd-labels"
	// labelPod names the pod on itself, for the NetworkPolicy that selects it.
	labelPod       = "opensandbox.io/sandboxd-pod"
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "sandboxd"

	// The init container's own uid: it needs none of the image's users.
	installUID = 65532
)

// buildPod turns spec into the pod of one sandbox, hardened as on Docker:
// not privileged, no privilege escalation when no-new-privileges is asked,
// capabilities as the spec sets them, the RuntimeDefault seccomp profile,
// no service-account token, limits on CPU and memory.
func buildPod(spec runtime.Spec, o *Options) (*corev1.Pod, error) {
	if errs := validation.IsDNS1123Label(spec.Name); len(errs) > 0 {
		return nil, fmt.Errorf("sandbox name %q is not a pod name: %s", spec.Name, strings.Join(errs, "; "))
	}
	labelsJSON, err := json.Marshal(spec.Labels)
	if err != nil {
		return nil, err
	}
	labels := podLabels(spec.Labels)
	labels[labelPod] = spec.Name
	labels[labelManagedBy] = managedBy

	sc, err := containerSecurity(spec)
	if err != nil {
		return nil, err
	}
	res, err := resources(spec, o)
	if err != nil {
		return nil, err
	}
	c := corev1.Container{
		Name:            sandboxContainer,
		Image:           spec.Image,
		Env:             envVars(spec.Env),
		SecurityContext: sc,
		Resources:       res,
		ImagePullPolicy: o.ImagePullPolicy,
		VolumeMounts:    []corev1.VolumeMount{{Name: agentVolume, MountPath: AgentDir, ReadOnly: true}},
	}
	if len(spec.Cmd) > 0 {
		// The request's entrypoint replaces the image's ENTRYPOINT and
		// CMD, as on Docker.
		c.Command = spec.Cmd
	}
	volumes := []corev1.Volume{{Name: agentVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	for i, t := range spec.Tmpfs {
		v := tmpfsVolume(fmt.Sprintf("tmpfs-%d", i), t)
		volumes = append(volumes, v)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: t.Path})
	}
	for i, m := range spec.Mounts {
		if m.Kind != runtime.MountVolume {
			return nil, &runtime.MountError{Target: m.Target, Reason: "host paths cannot be mounted on the Kubernetes runtime; use a PersistentVolumeClaim (a named volume)"}
		}
		name := fmt.Sprintf("volume-%d", i)
		volumes = append(volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Source, ReadOnly: m.ReadOnly},
		}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: m.ReadOnly, SubPath: m.SubPath})
	}

	podSC := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if spec.User != "" {
		uid, gid, err := numericUser(spec.User)
		if err != nil {
			return nil, err
		}
		podSC.RunAsUser = &uid
		if gid >= 0 {
			podSC.RunAsGroup = &gid
		}
		nonRoot := uid != 0
		podSC.RunAsNonRoot = &nonRoot
	}
	no, yes := false, true
	grace := int64(2)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        spec.Name,
			Namespace:   o.Namespace,
			Labels:      labels,
			Annotations: map[string]string{annotationLabels: string(labelsJSON)},
		},
		Spec: corev1.PodSpec{
			InitContainers:               []corev1.Container{installAgent(o)},
			Containers:                   []corev1.Container{c},
			Volumes:                      volumes,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			// No environment variables naming the namespace's Services.
			EnableServiceLinks: &no,
			// The pause container is PID 1 and reaps the orphans of
			// commands, as Docker's init does.
			ShareProcessNamespace:         &yes,
			SecurityContext:               podSC,
			ServiceAccountName:            o.ServiceAccount,
			NodeSelector:                  nodeSelector(o.NodeSelector, spec.Platform),
			Tolerations:                   o.Tolerations,
			TerminationGracePeriodSeconds: &grace,
		},
	}
	// [kubernetes] runtime_class_name, else [docker] runtime's name.
	if rc := cmp.Or(o.RuntimeClassName, spec.RuntimeClass); rc != "" {
		pod.Spec.RuntimeClassName = &rc
	}
	for _, s := range o.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	return pod, nil
}

// installAgent is the init container that copies the sandboxd binary of
// the agent image into the agent volume, as an unprivileged user that can
// write nothing else.
func installAgent(o *Options) corev1.Container {
	no, yes := false, true
	uid := int64(installUID)
	return corev1.Container{
		Name:            installContainer,
		Image:           o.AgentImage,
		Command:         []string{"/sandboxd", "install-agent", AgentDir},
		ImagePullPolicy: o.ImagePullPolicy,
		VolumeMounts:    []corev1.VolumeMount{{Name: agentVolume, MountPath: AgentDir}},
		SecurityContext: &corev1.SecurityContext{
			Privileged:               &no,
			AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem:   &yes,
			RunAsUser:                &uid,
			RunAsGroup:               &uid,
			RunAsNonRoot:             &yes,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
		},
	}
}

// podLabels returns the labels that Kubernetes accepts as pod labels (all
// of them stay in annotationLabels).
func podLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if validLabel(k, v) {
			out[k] = v
		}
	}
	return out
}

func validLabel(k, v string) bool {
	return len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0
}

func containerSecurity(spec runtime.Spec) (*corev1.SecurityContext, error) {
	if spec.UserNamespaces {
		// A pod would need procMount Unmasked, a Localhost seccomp profile
		// installed on every node and user-namespaced pods; none of it can
		// be set up from the API alone.
		return nil, fmt.Errorf("%w: nested sandboxes (user namespaces inside the sandbox) need the Docker runtime", runtime.ErrUnsupported)
	}
	if spec.SeccompProfile != "" || spec.AppArmorProfile != "" {
		return nil, fmt.Errorf("seccomp and AppArmor profiles by name are Docker's ([docker] seccomp_profile, apparmor_profile); pods run the RuntimeDefault profiles")
	}
	no := false
	caps := &corev1.Capabilities{Drop: capabilities(spec.Capabilities.Drop), Add: capabilities(spec.Capabilities.Add)}
	if spec.Capabilities.DropAll {
		caps.Drop = []corev1.Capability{"ALL"}
	}
	sc := &corev1.SecurityContext{
		Privileged:             &no,
		ReadOnlyRootFilesystem: &spec.ReadOnlyRoot,
		Capabilities:           caps,
	}
	if spec.NoNewPrivileges {
		sc.AllowPrivilegeEscalation = &no
	}
	return sc, nil
}

func capabilities(names []string) []corev1.Capability {
	var out []corev1.Capability
	for _, n := range names {
		out = append(out, corev1.Capability(n))
	}
	return out
}

// resources sets limits and requests as the spec asks, else requests of
// the configured defaults, never above the limits: requests are what the
// scheduler reserves. Kubernetes bounds processes per node, not per pod:
// Resources.Pids is the kubelet's podPidsLimit.
func resources(spec runtime.Spec, o *Options) (corev1.ResourceRequirements, error) {
	res := spec.Resources
	r := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if res.NanoCPUs > 0 {
		r.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(res.NanoCPUs/1e6, 1), resource.DecimalSI)
	}
	if res.MemoryBytes > 0 {
		r.Limits[corev1.ResourceMemory] = *resource.NewQuantity(res.MemoryBytes, resource.BinarySI)
	}
	switch {
	case res.GPUs > 0:
		r.Limits["nvidia.com/gpu"] = *resource.NewQuantity(int64(res.GPUs), resource.DecimalSI)
	case res.GPUs < 0:
		return r, fmt.Errorf("gpu: Kubernetes needs a number of GPUs, not all of them")
	}
	cpu, mem := o.DefaultCPURequest, o.DefaultMemoryRequest
	if res.CPURequest > 0 {
		cpu = *resource.NewMilliQuantity(max(res.CPURequest/1e6, 1), resource.DecimalSI)
	}
	if res.MemoryRequestBytes > 0 {
		mem = *resource.NewQuantity(res.MemoryRequestBytes, resource.BinarySI)
	}
	for name, q := range map[corev1.ResourceName]resource.Quantity{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem} {
		if q.IsZero() {
			continue
		}
		if l, ok := r.Limits[name]; ok && q.Cmp(l) > 0 {
			q = l
		}
		r.Requests[name] = q
	}
	return r, nil
}

func envVars(env []string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	return out
}

// tmpfsVolume is a memory-backed emptyDir for a tmpfs. emptyDirs are
// mounted nosuid and nodev, and exec (which Tmpfs.Exec asks for, and a
// pod cannot refuse); their mode is 0777.
func tmpfsVolume(name string, t runtime.Tmpfs) corev1.Volume {
	ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
	if t.SizeBytes > 0 {
		ed.SizeLimit = resource.NewQuantity(t.SizeBytes, resource.BinarySI)
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}}
}

// numericUser parses "uid" or "uid:gid" (gid -1 if absent): a pod names
// its user by number only.
func numericUser(user string) (uid, gid int64, err error) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err = strconv.ParseInt(u, 10, 64)
	if err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("user %q: the Kubernetes runtime needs a numeric uid (and gid), such as \"1000:1000\"", user)
	}
	gid = -1
	if hasGroup {
		if gid, err = strconv.ParseInt(g, 10, 64); err != nil || gid < 0 {
			return 0, 0, fmt.Errorf("user %q: the Kubernetes runtime needs a numeric gid", user)
		}
	}
	return uid, gid, nil
}

// nodeSelector is the configured selector, plus the node platform a spec
// asks for.
func nodeSelector(configured map[string]string, platform string) map[string]string {
	if platform == "" {
		return configured
	}
	out := maps.Clone(configured)
	if out == nil {
		out = map[string]string{}
	}
	os, arch, _ := strings.Cut(platform, "/")
	out["kubernetes.io/os"] = os
	if arch != "" {
		out["kubernetes.io/arch"] = arch
	}
	return out
}
