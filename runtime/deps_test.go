package runtime_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly: the interface package links only the standard
// library (and the policy values it carries), so that whatever implements
// or uses it, the agent included, pulls in no engine client with it.
func TestStandardLibraryOnly(t *testing.T) {
	ours := map[string]bool{
		"github.com/sandboxd/sandboxd/runtime":        true,
		"github.com/sandboxd/sandboxd/runtime/egress": true,
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if !ours[p] {
			t.Errorf("package runtime links %s; it may link only the standard library and runtime/egress", p)
		}
	}
}
