//go:build !linux

package docker

import (
	"fmt"

	"github.com/sandboxd/sandboxd/runtime"
)

// userNamespaceProfile needs the default profile's system call numbers,
// which the profile library defines for Linux builds only: a sandboxd
// running on macOS or Windows cannot create nested sandboxes.
func userNamespaceProfile() (string, error) {
	return "", fmt.Errorf("%w: nested sandboxes need sandboxd itself to run on Linux", runtime.ErrUnsupported)
}
