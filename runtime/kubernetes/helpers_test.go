package kubernetes

import (
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandboxd/sandboxd/runtime"
)

func testOptions() Options {
	return Options{
		Namespace: "sandboxes", AgentImage: "sandboxd:test", ImagePullPolicy: corev1.PullNever,
		DefaultCPURequest: resource.MustParse("100m"), DefaultMemoryRequest: resource.MustParse("128Mi"),
		Logger: slog.New(slog.DiscardHandler), LeaseName: "sandboxd-leader", Identity: "test",
		LeaseTiming: Timing{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond},
	}
}

func hardenedSpec() runtime.Spec {
	return runtime.Spec{
		Name: "sandbox-1", Image: "busybox", Cmd: []string{"sleep", "infinity"}, Env: []string{"A=1", "B=x=y"},
		Labels: map[string]string{
			"opensandbox.io/id":         "1",
			"opensandbox.io/expires-at": "2026-12-01T10:00:00.5Z", // not a label value
			"team":                      "a b",                    // nor this
		},
		Resources:       runtime.Resources{NanoCPUs: 500_000_000, MemoryBytes: 64 << 20, Pids: 100},
		User:            "1000:1001",
		ReadOnlyRoot:    true,
		Capabilities:    runtime.Capabilities{DropAll: true, Add: []string{"CHOWN", "KILL"}},
		NoNewPrivileges: true,
		Tmpfs:           []runtime.Tmpfs{{Path: "/tmp", SizeBytes: 256 << 20, Exec: true}},
	}
}
