package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/docker"
	"github.com/sandboxd/sandboxd/runtime/kubernetes"
)

// newRuntime connects to the engine [runtime] type names.
func newRuntime(ctx context.Context, cfg config.Config, log *slog.Logger) (runtime.Runtime, error) {
	if cfg.Runtime.Type == "kubernetes" {
		return newKubernetes(cfg.Kubernetes, log)
	}
	local, err := agentFor(cfg.Runtime.AgentBinaries, log)
	if err != nil {
		return nil, err
	}
	return docker.New(ctx, docker.Options{
		Host: cfg.Docker.Host, APITimeout: cfg.Docker.APITimeout.Duration, Logger: log,
		MountDir: filepath.Join(cfg.Store.Dir, "mounts"), AllowedHostPaths: cfg.Storage.AllowedHostPaths,
		AgentBinaries: cfg.Runtime.AgentBinaries, EmbeddedAgents: embeddedAgents(), LocalAgent: local,
		LogMaxSize: cfg.Docker.LogMaxSize, LogMaxFiles: cfg.Docker.LogMaxFiles, DiskLimit: cfg.Docker.DiskLimit,
		AgentTransport: cfg.Docker.AgentTransport,
	})
}

// agentFor returns the local agent when it serves this machine's platform
// (neither configured nor embedded), and says when it is sandboxd itself.
func agentFor(configured map[string]string, log *slog.Logger) (string, error) {
	own := "linux/" + goruntime.GOARCH
	if configured[own] != "" || embeddedAgents()[own] != nil {
		return "", nil
	}
	path, small, err := localAgent()
	if err != nil {
		return "", fmt.Errorf("locate the agent: %w", err)
	}
	if path != "" && !small {
		log.Info("the agent in sandboxes is this sandboxd binary; build "+agentName+" beside it for a smaller one (docs/platforms.md)", "binary", path)
	}
	return path, nil
}

func newKubernetes(k config.Kubernetes, log *slog.Logger) (*kubernetes.Kubernetes, error) {
	rc, err := kubernetes.RestConfig(k.Kubeconfig, k.Context)
	if err != nil {
		return nil, err
	}
	// Validated by config: the quantities parse.
	cpu, err := resource.ParseQuantity(k.DefaultCPURequest)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.default_cpu_request: %w", err)
	}
	mem, err := resource.ParseQuantity(k.DefaultMemoryRequest)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.default_memory_request: %w", err)
	}
	var tols []corev1.Toleration
	for _, t := range k.Tolerations {
		tols = append(tols, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect),
		})
	}
	// client-go logs through klog (leader election, stream errors): into
	// sandboxd's log, not bare on stderr.
	klog.SetSlogLogger(log.With("component", "client-go"))
	log.Info("kubernetes runtime", "api_server", rc.Host, "namespace", k.Namespace, "agent_image", k.AgentImage)
	return kubernetes.New(rc, kubernetes.Options{
		Namespace: k.Namespace, ServiceAccount: k.ServiceAccount, RuntimeClassName: k.RuntimeClassName,
		NodeSelector: k.NodeSelector, Tolerations: tols, ImagePullSecrets: k.ImagePullSecrets,
		AgentImage: k.AgentImage, ImagePullPolicy: corev1.PullPolicy(k.ImagePullPolicy),
		DefaultCPURequest: cpu, DefaultMemoryRequest: mem,
		APITimeout: k.APITimeout.Duration, Logger: log,
		LeaseName: k.LeaseName, Identity: replicaIdentity(),
	})
}

// replicaIdentity names this process in the Lease: the host (the pod's
// name in a Deployment) and a random part, so that a restarted replica is
// a new candidate, not the dead leader.
func replicaIdentity() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}
