package config

import (
	"slices"
	"strings"
	"testing"
)

// TestSandboxHardening: the hardening keys are read from [sandbox], and
// from [docker] as aliases; one given in both must agree.
func TestSandboxHardening(t *testing.T) {
	for _, tt := range []struct {
		name, doc string
		pids      int64
		drop      []string
		err       string
	}{
		{"sandbox", "[sandbox]\npids_limit = 100\ndrop_capabilities = [\"NET_RAW\"]\n", 100, []string{"NET_RAW"}, ""},
		{"docker alias", "[docker]\npids_limit = 200\n", 200, []string{"ALL"}, ""},
		{"both agree", "[sandbox]\npids_limit = 300\n[docker]\npids_limit = 300\n", 300, []string{"ALL"}, ""},
		{"each its own key", "[sandbox]\npids_limit = 300\n[docker]\ndrop_capabilities = [\"NET_RAW\"]\n", 300, []string{"NET_RAW"}, ""},
		{"both disagree", "[sandbox]\npids_limit = 100\n[docker]\npids_limit = 200\n", 0, nil, "sandbox.pids_limit and docker.pids_limit disagree"},
		{"validated", "[sandbox]\npids_limit = -1\n", 0, nil, "docker.pids_limit: must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeConfig(t, tt.doc))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Load = %v, want an error containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h := c.Hardening(); h.PidsLimit != tt.pids || !slices.Equal(h.DropCapabilities, tt.drop) {
				t.Errorf("Hardening() = pids %d, drop %v; want %d, %v", h.PidsLimit, h.DropCapabilities, tt.pids, tt.drop)
			}
			if len(c.Ignored) != 0 {
				t.Errorf("keys reported as ignored: %v", c.Ignored)
			}
		})
	}
}
