//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// secWait bounds the waits of the security tests: generous, because CI
// machines are loaded and a bound only stops a test that would hang.
const secWait = 5 * time.Minute

// secCapabilities is the documented capability set of a sandbox (config's
// default [docker] add_capabilities, SECURITY.md), with each capability's
// bit number from linux/capability.h.
var secCapabilities = map[string]uint{
	"CHOWN":            0,
	"DAC_OVERRIDE":     1,
	"FOWNER":           3,
	"FSETID":           4,
	"KILL":             5,
	"SETGID":           6,
	"SETUID":           7,
	"SETPCAP":          8,
	"NET_BIND_SERVICE": 10,
}

// secCapMask is secCapabilities as the hex mask /proc/PID/status prints.
func secCapMask() string {
	var m uint64
	for _, bit := range secCapabilities {
		m |= 1 << bit
	}
	return fmt.Sprintf("%016x", m)
}

// secWantError checks that a response is a refusal with the OpenSandbox
// error envelope: the wanted status, a JSON body whose code starts with
// codePrefix and whose message says something, and a request id.
func secWantError(t testing.TB, what string, status int, hdr http.Header, body []byte, wantStatus int, codePrefix string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d; body %s", what, status, wantStatus, body)
		return
	}
	var env struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Errorf("%s: body is not the error envelope: %v: %s", what, err, body)
		return
	}
	if !strings.HasPrefix(env.Code, codePrefix) || env.Message == "" {
		t.Errorf("%s: envelope code %q message %q, want code %s* and a message", what, env.Code, env.Message, codePrefix)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	if hdr.Get("X-Request-ID") == "" {
		t.Errorf("%s: no X-Request-ID on the refusal", what)
	}
}

// secInstanceContainers counts the containers a server's instance owns.
func secInstanceContainers(t testing.TB, s *Server) int {
	t.Helper()
	return len(containersByLabel(t, labelInstance, s.InstanceID))
}

// secAssertAbsent fails if p exists on the host.
func secAssertAbsent(t testing.TB, what, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("%s: %s exists on the host after the refusal (lstat: %v)", what, p, err)
	}
}

// secStatus parses "Key:\tvalue" lines such as those of /proc/PID/status.
func secStatus(text string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// secShell runs a shell command in the sandbox through the proxy route
// with the sandbox's token, and returns its stdout (joined) and its exit
// code (0, or the evalue of the error event).
func (b *execdBox) secShell(t testing.TB, command string) (string, int) {
	t.Helper()
	r := b.run(t, map[string]any{"command": command})
	last := r.last()
	code := 0
	switch {
	case last.Type == "error" && last.Error != nil:
		n, err := strconv.Atoi(last.Error.Evalue)
		if err != nil {
			t.Fatalf("command %q: error event with a non-numeric evalue %q", command, last.Error.Evalue)
		}
		code = n
	case last.Type != "execution_complete":
		t.Fatalf("command %q: stream ended with %q, not execution_complete or error: %s", command, last.Type, execdTail(r.Raw))
	}
	return strings.Join(r.Stdout, "\n"), code
}

// secCgroupValue reads one counter ("max" of pids.events, "oom_kill" of
// memory.oom_control) of a container's cgroup on the host, trying the
// cgroup v1 and v2 layouts of both Docker cgroup drivers.
func secCgroupValue(t testing.TB, containerID, controller string, files []string, key string) int64 {
	t.Helper()
	dirs := []string{
		filepath.Join("/sys/fs/cgroup", controller, "docker", containerID),
		filepath.Join("/sys/fs/cgroup", controller, "system.slice", "docker-"+containerID+".scope"),
		filepath.Join("/sys/fs/cgroup", "system.slice", "docker-"+containerID+".scope"),
		filepath.Join("/sys/fs/cgroup", "docker", containerID),
	}
	for _, d := range dirs {
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) == 2 && fields[0] == key {
					n, err := strconv.ParseInt(fields[1], 10, 64)
					if err != nil {
						t.Fatalf("%s/%s: %q is not a number", d, f, sc.Text())
					}
					return n
				}
			}
			t.Fatalf("%s/%s has no %q line:\n%s", d, f, key, data)
		}
	}
	t.Fatalf("no %s cgroup file %v found for container %s (looked in %v)", controller, files, containerID, dirs)
	return 0
}
