//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The Kubernetes tests run on the single-node cluster of e2e/k8s/up.sh, whose
// env file (/var/lib/sandboxd-k8s/env.sh) sets SANDBOXD_E2E_KUBECONFIG and
// puts its kubectl on PATH; e2e/run.sh brings it up and sources it.

// k8sKubeconfig returns the test cluster's admin kubeconfig, or skips the test
// when there is none; with SANDBOXD_E2E_REQUIRE_KUBERNETES=1 (e2e/run.sh) it
// fails instead.
func k8sKubeconfig(t testing.TB) string {
	t.Helper()
	kc := os.Getenv("SANDBOXD_E2E_KUBECONFIG")
	missing := ""
	if kc == "" {
		missing = "SANDBOXD_E2E_KUBECONFIG is not set"
	} else if _, err := os.Stat(kc); err != nil {
		missing = "SANDBOXD_E2E_KUBECONFIG: " + err.Error()
	}
	if missing != "" {
		if os.Getenv("SANDBOXD_E2E_REQUIRE_KUBERNETES") == "1" {
			t.Fatalf("%s, but SANDBOXD_E2E_REQUIRE_KUBERNETES=1", missing)
		}
		t.Skipf("SKIP: %s: no Kubernetes test cluster (as root: bash e2e/k8s/up.sh && . /var/lib/sandboxd-k8s/env.sh)", missing)
	}
	return kc
}

// kubectl runs the cluster's kubectl with kubeconfig kc and returns its
// standard output; it fails the test on an error. stdin may be nil.
func kubectl(t testing.TB, kc string, stdin io.Reader, args ...string) string {
	t.Helper()
	out, err := kubectlCmd(kc, stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlCmd is kubectl without the test: output (stderr included on an
// error) and error.
func kubectlCmd(kc string, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kc}, args...)...)
	cmd.Stdin = stdin
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

var k8sImage struct {
	once sync.Once
	name string
	err  error
	out  []byte
}

// k8sSandboxdImage imports the sandboxd image (images/sandboxd) around the
// binary under test into the cluster's containerd, once per run, under a tag
// naming that binary's digest, so that runs from different trees on one
// cluster never swap each other's agent; it returns the image's name.
func k8sSandboxdImage(t testing.TB) string {
	t.Helper()
	k8sImage.once.Do(func() {
		b, err := os.ReadFile(sandboxdBinary)
		if err != nil {
			k8sImage.err = err
			return
		}
		sum := sha256.Sum256(b)
		tag := "bin-" + hex.EncodeToString(sum[:6])
		cmd := exec.Command("bash", filepath.Join(repoRoot(), "e2e", "k8s", "images.sh"), "sandboxd")
		cmd.Env = append(os.Environ(), "SANDBOXD_K8S_SANDBOXD_BINARY="+sandboxdBinary, "SANDBOXD_K8S_SANDBOXD_TAG="+tag)
		k8sImage.out, k8sImage.err = cmd.CombinedOutput()
		k8sImage.name = "localhost/sandboxd:" + tag
	})
	if k8sImage.err != nil {
		t.Fatalf("import the sandboxd image: %v\n%s", k8sImage.err, k8sImage.out)
	}
	return k8sImage.name
}

// TestKubernetesClusterRunsSandboxdImage checks the ground the Kubernetes
// tests stand on: the node is Ready, and the sandboxd image of the binary
// under test, imported without a registry, runs in a pod with
// imagePullPolicy Never and no service account token.
func TestKubernetesClusterRunsSandboxdImage(t *testing.T) {
	kc := k8sKubeconfig(t)
	image := k8sSandboxdImage(t)
	if got := kubectl(t, kc, nil, "get", "node", "localhost", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); got != "True" {
		t.Fatalf("node localhost Ready = %q", got)
	}
	name := "e2e-image-" + randomHex(t, 4)
	t.Cleanup(func() { kubectlCmd(kc, nil, "-n", "default", "delete", "pod", name, "--wait=false") })
	kubectl(t, kc, nil, "-n", "default", "run", name, "--image", image, "--image-pull-policy", "Never",
		"--restart", "Never", "--overrides", `{"spec":{"automountServiceAccountToken":false}}`, "--", "version")
	if out, err := kubectlCmd(kc, nil, "-n", "default", "wait", "pod/"+name, "--for", "jsonpath={.status.phase}=Succeeded", "--timeout", "120s"); err != nil {
		desc, _ := kubectlCmd(kc, nil, "-n", "default", "describe", "pod", name)
		t.Fatalf("pod %s did not succeed: %v\n%s\n%s", name, err, out, desc)
	}
	if logs := kubectl(t, kc, nil, "-n", "default", "logs", name); !strings.HasPrefix(logs, "sandboxd ") {
		t.Fatalf("pod %s logged %q, want sandboxd's version", name, logs)
	}
}
