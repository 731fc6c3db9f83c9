//go:build e2e

package e2e

import (
	"context"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/docker"
	sbkubernetes "github.com/sandboxd/sandboxd/runtime/kubernetes"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// conformanceSpec is the sandbox the runtime contract suite makes.
func conformanceSpec() runtime.Spec {
	return runtime.Spec{Image: imageBusybox, Cmd: []string{"sleep", "infinity"}}
}

// TestRuntimeConformanceDocker runs the runtime contract suite
// (runtimetest.Conformance, which the fakes pass in unit tests) against the
// real dockerd.
func TestRuntimeConformanceDocker(t *testing.T) {
	d, err := docker.New(context.Background(), docker.Options{
		Logger: slog.New(slog.DiscardHandler), MountDir: t.TempDir(), LocalAgent: sandboxdBinary,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	runtimetest.Conformance(t, d, conformanceSpec())
}

// TestRuntimeConformanceKubernetes runs the same suite against the test
// cluster (skipped without one, unless SANDBOXD_E2E_REQUIRE_KUBERNETES=1).
func TestRuntimeConformanceKubernetes(t *testing.T) {
	kc := kubeClusterOrSkip(t)
	rc, err := sbkubernetes.RestConfig(kc.kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	k, err := sbkubernetes.New(rc, sbkubernetes.Options{
		Namespace: kc.namespace, AgentImage: kc.agentImage, ImagePullPolicy: corev1.PullIfNotPresent,
		DefaultCPURequest: resource.MustParse("10m"), DefaultMemoryRequest: resource.MustParse("32Mi"),
		Logger: slog.New(slog.DiscardHandler), LeaseName: "sandboxd-conformance", Identity: "conformance",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	runtimetest.Conformance(t, k, conformanceSpec())
}
