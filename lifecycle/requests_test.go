package lifecycle

import "testing"

func TestResourceRequests(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name         string
		limits, reqs map[string]string
		cpuRq, memRq int64
		code         string
	}{
		{"none", nil, nil, 0, 0, ""},
		{"cpu and memory", map[string]string{"cpu": "2", "memory": "1Gi"}, map[string]string{"cpu": "500m", "memory": "256Mi"}, 5e8, 256 << 20, ""},
		{"equal to the limits", map[string]string{"cpu": "1", "memory": "512Mi"}, map[string]string{"cpu": "1", "memory": "512Mi"}, 1e9, 512 << 20, ""},
		{"tiny cpu", nil, map[string]string{"cpu": "1m"}, 1e6, 0, ""},
		{"unknown keys ignored", nil, map[string]string{"ephemeral-storage": "1Gi", "cpu": " "}, 0, 0, ""},
		{"cpu above the limit", map[string]string{"cpu": "1"}, map[string]string{"cpu": "2"}, 0, 0, CodeInvalidParameter},
		{"cpu above the default limit", nil, map[string]string{"cpu": "4"}, 0, 0, CodeInvalidParameter},
		{"memory above the limit", map[string]string{"memory": "256Mi"}, map[string]string{"memory": "1Gi"}, 0, 0, CodeInvalidParameter},
		{"bad cpu", nil, map[string]string{"cpu": "lots"}, 0, 0, CodeInvalidParameter},
		{"bad memory", nil, map[string]string{"memory": "-5"}, 0, 0, CodeInvalidParameter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validRequest()
			req.ResourceLimits, req.ResourceRequests = tt.limits, tt.reqs
			if tt.code != "" {
				_, err := e.m.Sandboxes.Create(t.Context(), req)
				wantCode(t, err, KindInvalid, tt.code)
				return
			}
			_, cid := e.create(t, req)
			spec := e.rt.Spec(t, cid)
			if r := spec.Resources; r.CPURequest != tt.cpuRq || r.MemoryRequestBytes != tt.memRq {
				t.Errorf("cpu request %d, memory request %d; want %d, %d", r.CPURequest, r.MemoryRequestBytes, tt.cpuRq, tt.memRq)
			}
		})
	}
}
