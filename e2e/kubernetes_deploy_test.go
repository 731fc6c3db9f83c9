//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// TestKubernetesDeploy applies deploy/kubernetes to the test cluster as an
// operator would, waits for the Deployment, reaches /health through
// `kubectl port-forward` of the Service, and creates a sandbox through the
// deployed sandboxd and runs a command in it: sandboxd works with exactly the
// Role's verbs and its in-cluster service account, and its sandboxes get
// no service account token.
//
// The overlay changes only what this node lacks or what isolates the test:
// a namespace of its own (the config's too), the image under test, an API
// key Secret, and the API server's address. The node has no Service data
// path, so the pod runs in the host's network namespace (on a free loopback
// port, probed there) and reaches the API server at 127.0.0.1.
func TestKubernetesDeploy(t *testing.T) {
	kc := k8sKubeconfig(t)
	image := k8sSandboxdImage(t)
	ns := "e2e-deploy-" + randomHex(t, 4)
	port := freePort(t)
	apiKey := randomHex(t, 24)

	api, err := url.Parse(kubectl(t, kc, nil, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(), "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}

	// The shipped sandboxd.toml with the test's namespace, image and listener.
	var cfg map[string]any
	if _, err := toml.DecodeFile(filepath.Join(repoRoot(), "deploy", "kubernetes", "sandboxd.toml"), &cfg); err != nil {
		t.Fatal(err)
	}
	mergeTables(cfg, map[string]any{
		"server":     map[string]any{"host": "127.0.0.1", "port": port},
		"kubernetes": map[string]any{"namespace": ns, "agent_image": image},
	})
	var conf bytes.Buffer
	if err := toml.NewEncoder(&conf).Encode(cfg); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sandboxd.toml"), conf.String())
	writeFile(t, filepath.Join(dir, "kustomization.yaml"), fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %[1]s
resources: [%[2]s]
images:
  - {name: sandboxd, newName: %[3]s, newTag: "%[4]s"}
configMapGenerator:
  - {name: sandboxd-config, behavior: replace, files: [sandboxd.toml]}
secretGenerator:
  - name: sandboxd
    literals: [api-key=%[5]s]
    options: {disableNameSuffixHash: true}
patches:
  - target: {kind: Deployment, name: sandboxd}
    patch: |-
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: %[6]d}
      - {op: add, path: /spec/template/spec/containers/0/readinessProbe/httpGet/host, value: "127.0.0.1"}
      - {op: add, path: /spec/template/spec/containers/0/livenessProbe/httpGet/host, value: "127.0.0.1"}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: "%[7]s"}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "%[8]s"}}
`, ns, base, strings.SplitN(image, ":", 2)[0], strings.SplitN(image, ":", 2)[1], apiKey, port, api.Hostname(), api.Port()))

	t.Cleanup(func() {
		if t.Failed() {
			out, _ := kubectlCmd(kc, nil, "-n", ns, "get", "all,events", "-o", "wide")
			logs, _ := kubectlCmd(kc, nil, "-n", ns, "logs", "deployment/sandboxd", "--tail", "100")
			t.Logf("namespace %s:\n%s\nsandboxd's log:\n%s", ns, out, logs)
		}
		// Deleting the namespace deletes sandboxd and every sandbox pod in it.
		if out, err := kubectlCmd(kc, nil, "delete", "namespace", ns, "--wait=true", "--timeout=120s"); err != nil {
			t.Logf("delete namespace %s: %v\n%s", ns, err, out)
		}
	})
	kubectl(t, kc, nil, "apply", "-k", dir)
	if out, err := kubectlCmd(kc, nil, "-n", ns, "rollout", "status", "deployment/sandboxd", "--timeout=180s"); err != nil {
		t.Fatalf("deployment sandboxd not ready: %v\n%s", err, out)
	}

	s := &Server{URL: "http://" + portForward(t, kc, ns, "service/sandboxd", 8080), APIKey: apiKey, t: t,
		client: &http.Client{Timeout: 2 * time.Minute}}
	if status, _, body := s.do(t, http.MethodGet, "/health", nil, map[string]string{apiKeyHeader: ""}); status != http.StatusOK {
		t.Fatalf("GET /health through port-forward: status %d, body %s", status, body)
	}

	sb := createSandbox(t, s, "/v1/sandboxes", busyboxRequest())
	waitState(t, s, sb.ID, "Running")
	if got := runCommand(t, s, sb.ID, "echo hello from $(hostname)"); !strings.HasPrefix(got, "hello from ") {
		t.Fatalf("command output %q", got)
	}
	// The sandbox's pod runs as the ServiceAccount bound to no role, and no
	// token of it (nor any other) is in the pod.
	pod := kubectl(t, kc, nil, "-n", ns, "get", "pods", "-l", labelID+"="+sb.ID, "-o",
		`jsonpath={.items[0].spec.serviceAccountName} {.items[0].spec.automountServiceAccountToken} {.items[0].spec.volumes[*].projected.sources[*].serviceAccountToken.path}`)
	if pod != "sandbox false " {
		t.Errorf("sandbox pod: serviceAccountName, automountServiceAccountToken, token paths = %q, want \"sandbox false \"", pod)
	}
	if got := runCommand(t, s, sb.ID, "ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true"); !strings.Contains(got, "No such file") {
		t.Errorf("sandbox sees a service account directory: %q", got)
	}
	s.doJSON(t, http.MethodDelete, sandboxPath(sb.ID), nil, http.StatusNoContent, nil)
}

// portForward runs `kubectl port-forward target :remote` in namespace ns
// until the test ends and returns the local address it listens on.
func portForward(t testing.TB, kc, ns, target string, remote int) string {
	t.Helper()
	cmd := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "port-forward", target, fmt.Sprintf(":%d", remote))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// "Forwarding from 127.0.0.1:PORT -> REMOTE"
	re := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:[0-9]+) `)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case addr := <-found:
		return addr
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait() // stderr is complete after this
		t.Fatalf("kubectl port-forward %s: no listener after a minute; stderr: %s", target, stderr.String())
	}
	return ""
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
