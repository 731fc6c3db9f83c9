package lifecycle

import "strings"

// applyRequests reads resourceRequests (upstream 1.1; Kubernetes' resource
// requests) into res: what the sandbox is guaranteed, which the runtime
// applies (Docker as the kubelet does on its cgroups: a CPU weight of 1024
// shares per CPU, a memory reservation the kernel reclaims down to under
// pressure). A request above its limit is refused, as Kubernetes does;
// other keys are ignored, like those of resourceLimits.
func applyRequests(res *Resources, requests map[string]string) error {
	if v := strings.TrimSpace(requests["cpu"]); v != "" {
		n, ok := ParseCPU(v)
		if !ok {
			return errf(KindInvalid, CodeInvalidParameter, "resourceRequests.cpu %q is not a CPU quantity (examples: \"500m\", \"1\", \"0.5\")", v)
		}
		if res.NanoCPUs > 0 && n > res.NanoCPUs {
			return errf(KindInvalid, CodeInvalidParameter, "resourceRequests.cpu %q is more than the CPU limit", v)
		}
		res.CPURequest = n
	}
	if v := strings.TrimSpace(requests["memory"]); v != "" {
		n, ok := ParseMemory(v)
		if !ok || n <= 0 {
			return errf(KindInvalid, CodeInvalidParameter, "resourceRequests.memory %q is not a memory quantity (examples: \"512Mi\", \"2Gi\", \"1G\")", v)
		}
		if res.MemoryBytes > 0 && n > res.MemoryBytes {
			return errf(KindInvalid, CodeInvalidParameter, "resourceRequests.memory %q is more than the memory limit", v)
		}
		res.MemoryRequestBytes = n
	}
	return nil
}
