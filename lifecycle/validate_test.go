package lifecycle

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

func TestValidateLabelKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"team", true},
		{"a", true},
		{"A-b_c.d", true},
		{"1abc9", true},
		{strings.Repeat("k", 63), true},
		{strings.Repeat("k", 64), false},
		{"", false},
		{"-start", false},
		{"end-", false},
		{"_x", false},
		{"has space", false},
		{"bad!char", false},
		{"ünicode", false},
		{"example.com/name", true},
		{"sub.example.com/team-1", true},
		{"example.com/", false},
		{"/name", false},
		{"Example.com/name", false}, // prefix must be lowercase DNS
		{"exa_mple.com/name", false},
		{"example.com/a/b", false},
		{strings.Repeat("a", 254) + "/x", false},
		{"example.com/" + strings.Repeat("n", 64), false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			msg := validateLabelKey(tt.key)
			if (msg == "") != tt.ok {
				t.Errorf("validateLabelKey(%q) = %q, want ok=%v", tt.key, msg, tt.ok)
			}
		})
	}
}

func TestValidateLabelValue(t *testing.T) {
	tests := []struct {
		value string
		ok    bool
	}{
		{"", true},
		{"v1", true},
		{"a.b-c_d", true},
		{strings.Repeat("v", 63), true},
		{strings.Repeat("v", 64), false},
		{"-v", false},
		{"v-", false},
		{"with space", false},
		{"a/b", false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			msg := validateLabelValue(tt.value)
			if (msg == "") != tt.ok {
				t.Errorf("validateLabelValue(%q) = %q, want ok=%v", tt.value, msg, tt.ok)
			}
		})
	}
}

func TestValidateMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range maxMetadataEntries + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name     string
		md       map[string]string
		reserved string
		code     string // "" = valid
	}{
		{"nil", nil, CodeInvalidMetadata, ""},
		{"valid", map[string]string{"team": "a", "example.com/x": ""}, CodeInvalidMetadata, ""},
		{"reserved on create", map[string]string{"opensandbox.io/id": "x"}, CodeInvalidMetadata, CodeInvalidMetadata},
		{"reserved on patch", map[string]string{"opensandbox.io/id": "x"}, CodeReservedMetadata, CodeReservedMetadata},
		{"bad key", map[string]string{"bad key": "x"}, CodeReservedMetadata, CodeInvalidMetadata},
		{"bad value", map[string]string{"k": "bad value"}, CodeReservedMetadata, CodeInvalidMetadata},
		{"too many", many, CodeInvalidMetadata, CodeInvalidMetadata},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateMetadata(tt.md, tt.reserved)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("validateMetadata: %v", err)
				}
				return
			}
			wantCode(t, err, KindInvalid, tt.code)
		})
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512Mi", 512 << 20, true},
		{"2Gi", 2 << 30, true},
		{"1G", 1e9, true},
		{"512M", 512e6, true},
		{"100kb", 100e3, true},
		{"100KB", 100e3, true},
		{"64Ki", 64 << 10, true},
		{"1048576", 1 << 20, true},
		{"1.5Gi", 3 << 29, true},
		{" 1Gi ", 1 << 30, true},
		{"1Tb", 1e12, true},
		{"", 0, false},
		{"garbage", 0, false},
		{"Gi", 0, false},
		{"12Qi", 0, false},
		{"-1Gi", 0, false},
		{"0", 0, false},
		{"1.2.3Mi", 0, false},
		{"99999999Ti", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseMemory(tt.in)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseMemory(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseCPU(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"500m", 5e8, true},
		{"1", 1e9, true},
		{"0.5", 5e8, true},
		{"2.25", 2.25e9, true},
		{"1m", 1e6, true},
		{"0", 0, false},
		{"0m", 0, false},
		{"-1", 0, false},
		{"abc", 0, false},
		{"", 0, false},
		{"1Gi", 0, false},
		{"1025", 0, false},
		{"0.0001", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseCPU(tt.in)
			if ok != tt.ok || got != tt.want {
				t.Errorf("ParseCPU(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseResources(t *testing.T) {
	tests := []struct {
		name    string
		limits  map[string]string
		defCPU  string
		defMem  string
		want    Resources
		errWord string // the key the error must name; "" = no error
	}{
		{"defaults", nil, "1", "2Gi", Resources{NanoCPUs: 1e9, MemoryBytes: 2 << 30}, ""},
		{"no defaults", map[string]string{}, "", "", Resources{}, ""},
		{"explicit", map[string]string{"cpu": "500m", "memory": "512Mi"}, "1", "2Gi", Resources{NanoCPUs: 5e8, MemoryBytes: 512 << 20}, ""},
		{"cpu only keeps memory default", map[string]string{"cpu": "2"}, "1", "2Gi", Resources{NanoCPUs: 2e9, MemoryBytes: 2 << 30}, ""},
		{"gpu count", map[string]string{"gpu": "2"}, "", "", Resources{GPUs: 2}, ""},
		{"gpu all", map[string]string{"gpu": "all"}, "", "", Resources{GPUs: -1}, ""},
		{"unknown key ignored", map[string]string{"ephemeral-storage": "10Gi"}, "", "", Resources{}, ""},
		{"bad cpu", map[string]string{"cpu": "lots"}, "1", "2Gi", Resources{}, "resourceLimits.cpu"},
		{"bad memory", map[string]string{"memory": "big"}, "1", "2Gi", Resources{}, "resourceLimits.memory"},
		{"memory too small", map[string]string{"memory": "100kb"}, "1", "2Gi", Resources{}, "resourceLimits.memory"},
		{"bad gpu", map[string]string{"gpu": "-1"}, "", "", Resources{}, "resourceLimits.gpu"},
		{"bad default", nil, "x", "2Gi", Resources{}, "resourceLimits.cpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseResources(tt.limits, tt.defCPU, tt.defMem)
			if tt.errWord != "" {
				wantCode(t, err, KindInvalid, CodeInvalidParameter)
				if !strings.Contains(err.Error(), tt.errWord) {
					t.Errorf("error %q does not name %s", err, tt.errWord)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseResources: %v", err)
			}
			if got != tt.want {
				t.Errorf("ParseResources = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseMetadataFilter(t *testing.T) {
	tests := []struct {
		in   string
		want map[string]string
		ok   bool
	}{
		{"", map[string]string{}, true},
		{"a=1", map[string]string{"a": "1"}, true},
		{"a=1&b=2", map[string]string{"a": "1", "b": "2"}, true},
		{"team%2Fx=a%20b", map[string]string{"team/x": "a b"}, true},
		{"a=", map[string]string{"a": ""}, true},
		{"a", nil, false},
		{"=1", nil, false},
		{"a=1&", nil, false},
		{"a=1&&b=2", nil, false},
		{"a=%zz", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMetadataFilter(tt.in)
			if !tt.ok {
				wantCode(t, err, KindInvalid, CodeInvalidMetaFormat)
				return
			}
			if err != nil {
				t.Fatalf("ParseMetadataFilter(%q): %v", tt.in, err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("ParseMetadataFilter(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestValidateVolumeShape(t *testing.T) {
	host := &HostPath{Path: "/data"}
	pvc := &PVC{ClaimName: "cache"}
	oss := anyObject(`{"bucket":"b"}`)
	tests := []struct {
		name string
		v    Volume
		code string // "" = valid
	}{
		{"host ok", Volume{Name: "data", MountPath: "/mnt/data", Host: host}, ""},
		{"pvc ok", Volume{Name: "cache-1", MountPath: "/cache", PVC: pvc, SubPath: "a/b"}, ""},
		{"name uppercase", Volume{Name: "Data", MountPath: "/m", Host: host}, CodeVolInvalidName},
		{"name empty", Volume{Name: "", MountPath: "/m", Host: host}, CodeVolInvalidName},
		{"name underscore", Volume{Name: "a_b", MountPath: "/m", Host: host}, CodeVolInvalidName},
		{"name too long", Volume{Name: strings.Repeat("a", 64), MountPath: "/m", Host: host}, CodeVolInvalidName},
		{"duplicate", Volume{Name: "taken", MountPath: "/m", Host: host}, CodeVolDuplicateName},
		{"mountPath relative", Volume{Name: "v", MountPath: "m", Host: host}, CodeVolInvalidMountPath},
		{"mountPath empty", Volume{Name: "v", MountPath: "", Host: host}, CodeVolInvalidMountPath},
		{"mountPath dotdot", Volume{Name: "v", MountPath: "/a/../etc", Host: host}, CodeVolInvalidMountPath},
		{"subPath dotdot", Volume{Name: "v", MountPath: "/m", SubPath: "a/../../b", Host: host}, CodeVolInvalidSubPath},
		{"subPath absolute", Volume{Name: "v", MountPath: "/m", SubPath: "/a", Host: host}, CodeVolInvalidSubPath},
		{"subPath dots in name ok", Volume{Name: "v", MountPath: "/m", SubPath: "a..b", Host: host}, ""},
		{"no backend", Volume{Name: "v", MountPath: "/m"}, CodeVolInvalidBackend},
		{"two backends", Volume{Name: "v", MountPath: "/m", Host: host, PVC: pvc}, CodeVolInvalidBackend},
		{"ossfs unsupported", Volume{Name: "v", MountPath: "/m", OSSFS: &oss}, CodeVolUnsupported},
		{"bad claim name", Volume{Name: "v", MountPath: "/m", PVC: &PVC{ClaimName: "Bad_Name"}}, CodeVolInvalidPVCName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateVolumeShape(tt.v, map[string]bool{"taken": true})
			if tt.code == "" {
				if err != nil {
					t.Fatalf("validateVolumeShape: %v", err)
				}
				return
			}
			wantCode(t, err, KindInvalid, tt.code)
		})
	}
}

func TestValidateVolumeShapeMarksSeen(t *testing.T) {
	seen := map[string]bool{}
	v := Volume{Name: "data", MountPath: "/m", Host: &HostPath{Path: "/x"}}
	if err := validateVolumeShape(v, seen); err != nil {
		t.Fatal(err)
	}
	wantCode(t, validateVolumeShape(v, seen), KindInvalid, CodeVolDuplicateName)
}

func TestParseRenewOnAccess(t *testing.T) {
	tests := []struct {
		ext  map[string]string
		want int
		ok   bool
	}{
		{nil, 0, true},
		{map[string]string{"other": "1"}, 0, true},
		{map[string]string{ExtRenewOnAccess: "299"}, 0, false},
		{map[string]string{ExtRenewOnAccess: "300"}, 300, true},
		{map[string]string{ExtRenewOnAccess: " 3600 "}, 3600, true},
		{map[string]string{ExtRenewOnAccess: "86400"}, 86400, true},
		{map[string]string{ExtRenewOnAccess: "86401"}, 0, false},
		{map[string]string{ExtRenewOnAccess: "abc"}, 0, false},
		{map[string]string{ExtRenewOnAccess: ""}, 0, false},
		{map[string]string{ExtRenewOnAccess: "300.5"}, 0, false},
	}
	for _, tt := range tests {
		got, err := parseRenewOnAccess(tt.ext)
		if !tt.ok {
			wantCode(t, err, KindInvalid, CodeInvalidParameter)
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseRenewOnAccess(%v) = %d, %v; want %d", tt.ext, got, err, tt.want)
		}
	}
}

func TestParseNested(t *testing.T) {
	for _, tc := range []struct {
		name        string
		allow       bool
		cfgUser     string
		ext         map[string]string
		wantErr     string
		wantNested  bool
		wantUserOut string
	}{
		{name: "absent", allow: true, ext: map[string]string{}},
		{name: "false", allow: false, ext: map[string]string{ExtNested: "false"}},
		{name: "forbidden by default", ext: map[string]string{ExtNested: "true"}, wantErr: "allow_nested"},
		{name: "not a bool", allow: true, ext: map[string]string{ExtNested: "yes please"}, wantErr: "must be"},
		{name: "default user", allow: true, ext: map[string]string{ExtNested: "true"}, wantNested: true, wantUserOut: nestedUser},
		{name: "request's user", allow: true, ext: map[string]string{ExtNested: "true", ExtUser: "2000:3000"}, wantNested: true, wantUserOut: "2000:3000"},
		{name: "configured user", allow: true, cfgUser: "1500:1500", ext: map[string]string{ExtNested: "TRUE"}, wantNested: true, wantUserOut: "1500:1500"},
		{name: "root refused", allow: true, ext: map[string]string{ExtNested: "true", ExtUser: "0:0"}, wantErr: "non-root"},
		{name: "name refused", allow: true, ext: map[string]string{ExtNested: "true", ExtUser: "app"}, wantErr: "non-root"},
		{name: "root group refused", allow: true, ext: map[string]string{ExtNested: "true", ExtUser: "1000:0"}, wantErr: "non-root"},
		{name: "configured root refused", allow: true, cfgUser: "root", ext: map[string]string{ExtNested: "true"}, wantErr: "non-root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Config{Docker: config.Docker{Hardening: config.Hardening{User: tc.cfgUser}}, Sandbox: config.Sandbox{AllowNested: tc.allow}}
			h, err := defaultsFrom(cfg).parseHardening(tc.ext)
			if tc.wantErr != "" {
				e, ok := AsError(err)
				if !ok || e.Kind != KindInvalid || e.Code != CodeInvalidParameter || !strings.Contains(e.Message, tc.wantErr) {
					t.Fatalf("err %v, want a 400 saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.nested != tc.wantNested || (tc.wantNested && h.user != tc.wantUserOut) {
				t.Fatalf("nested %v user %q, want %v %q", h.nested, h.user, tc.wantNested, tc.wantUserOut)
			}
			spec := defaultsFrom(cfg).sandboxSpec("id", "img", nil, nil, nil, Resources{}, runtime.Network{}, nil, h)
			if spec.UserNamespaces != tc.wantNested {
				t.Fatalf("spec.UserNamespaces %v", spec.UserNamespaces)
			}
		})
	}
}
