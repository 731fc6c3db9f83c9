//go:build linux

package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// The Kubernetes runtime keeps the runtime contract on client-go's fake
// clientset (the test cluster runs the same suite in e2e).
func TestConformance(t *testing.T) {
	cs, k, _ := fakeCluster()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testOptions().Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runtimetest.Conformance(t, k, runtime.Spec{Image: "busybox", Cmd: []string{"sleep", "infinity"}})
}
