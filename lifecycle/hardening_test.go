//go:build linux

package lifecycle

import (
	"testing"

	"github.com/sandboxd/sandboxd/config"
)

func TestParseHardening(t *testing.T) {
	tests := []struct {
		name      string
		cfg       config.Docker
		ext       map[string]string
		wantRO    bool
		wantUser  string
		wantError bool
	}{
		{name: "nothing asked, nothing configured"},
		{name: "config defaults apply", cfg: config.Docker{Hardening: config.Hardening{ReadOnlyRootfs: true, User: "1000:1000"}}, wantRO: true, wantUser: "1000:1000"},
		{name: "read-only asked", ext: map[string]string{ExtReadOnlyRootfs: "true"}, wantRO: true},
		{name: "read-only asked off", ext: map[string]string{ExtReadOnlyRootfs: "false"}},
		{name: "read-only with spaces and case", ext: map[string]string{ExtReadOnlyRootfs: " TRUE "}, wantRO: true},
		{name: "read-only not a bool", ext: map[string]string{ExtReadOnlyRootfs: "yes please"}, wantError: true},
		{name: "read-only cannot be loosened", cfg: config.Docker{Hardening: config.Hardening{ReadOnlyRootfs: true}}, ext: map[string]string{ExtReadOnlyRootfs: "false"}, wantError: true},
		{name: "read-only repeated", cfg: config.Docker{Hardening: config.Hardening{ReadOnlyRootfs: true}}, ext: map[string]string{ExtReadOnlyRootfs: "true"}, wantRO: true},
		{name: "numeric user", ext: map[string]string{ExtUser: "1000:1000"}, wantUser: "1000:1000"},
		{name: "named user", ext: map[string]string{ExtUser: "nobody"}, wantUser: "nobody"},
		{name: "user and group names", ext: map[string]string{ExtUser: "app:staff"}, wantUser: "app:staff"},
		{name: "empty user", ext: map[string]string{ExtUser: ""}, wantError: true},
		{name: "user with a space", ext: map[string]string{ExtUser: "a b"}, wantError: true},
		{name: "user with two colons", ext: map[string]string{ExtUser: "1:2:3"}, wantError: true},
		{name: "user path", ext: map[string]string{ExtUser: "../root"}, wantError: true},
		{name: "configured user repeated", cfg: config.Docker{Hardening: config.Hardening{User: "1000"}}, ext: map[string]string{ExtUser: "1000"}, wantUser: "1000"},
		{name: "configured user cannot be changed", cfg: config.Docker{Hardening: config.Hardening{User: "1000"}}, ext: map[string]string{ExtUser: "0"}, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := defaultsFrom(config.Config{Docker: tt.cfg}).parseHardening(tt.ext)
			if tt.wantError {
				wantCode(t, err, KindInvalid, CodeInvalidParameter)
				return
			}
			if err != nil {
				t.Fatalf("parseHardening: %v", err)
			}
			if h.readOnlyRootfs != tt.wantRO || h.user != tt.wantUser {
				t.Errorf("got read-only %v user %q, want %v %q", h.readOnlyRootfs, h.user, tt.wantRO, tt.wantUser)
			}
		})
	}
}

func TestCreateHardeningSpec(t *testing.T) {
	tests := []struct {
		name      string
		cfg       func(*config.Config)
		ext       map[string]string
		wantRO    bool
		wantUser  string
		wantTmpfs bool
	}{
		{name: "defaults: writable root, image user"},
		{name: "request asks read-only and a user", ext: map[string]string{ExtReadOnlyRootfs: "true", ExtUser: "1000:1000"}, wantRO: true, wantUser: "1000:1000", wantTmpfs: true},
		{name: "config asks read-only", cfg: func(c *config.Config) { c.Docker.ReadOnlyRootfs = true }, wantRO: true, wantTmpfs: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.cfg)
			req := validRequest()
			req.Extensions = tt.ext
			sb, cid := e.create(t, req)
			spec := e.rt.Spec(t, cid)
			if spec.ReadOnlyRoot != tt.wantRO || spec.User != tt.wantUser {
				t.Errorf("spec read-only %v user %q, want %v %q", spec.ReadOnlyRoot, spec.User, tt.wantRO, tt.wantUser)
			}
			ok := len(spec.Tmpfs) == 1 && spec.Tmpfs[0].Path == "/tmp"
			if ok != tt.wantTmpfs || (ok && !spec.Tmpfs[0].Exec) || (!ok && len(spec.Tmpfs) > 0) {
				t.Errorf("spec tmpfs %+v, want /tmp (exec): %v", spec.Tmpfs, tt.wantTmpfs)
			}
			rec, err := e.store.Sandbox(sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.ReadOnlyRootfs != tt.wantRO {
				t.Errorf("record read-only %v, want %v", rec.ReadOnlyRootfs, tt.wantRO)
			}
		})
	}
}

// TestBlankLimitsKeepDefaults: a blank cpu or memory limit is no way to
// lift the server's default limits.
func TestBlankLimitsKeepDefaults(t *testing.T) {
	for _, limits := range []map[string]string{
		{"cpu": "", "memory": ""},
		{"cpu": " ", "memory": "\t"},
	} {
		r, err := ParseResources(limits, "1", "2Gi")
		if err != nil || r.NanoCPUs != 1e9 || r.MemoryBytes != 2<<30 {
			t.Errorf("ParseResources(%q) = %+v, %v; want the defaults", limits, r, err)
		}
	}
}
