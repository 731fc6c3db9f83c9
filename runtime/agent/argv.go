//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// POST /command with "argv" (execd 1.1) runs a program directly, without
// a shell: the SDKs use it to pass arguments that no quoting can mangle,
// and it works in images that have no shell at all.

// parseArgv validates a request's argv as execd does: argv[0] non-empty,
// no null element, no NUL byte. A nil argv is nil.
func parseArgv(raw []*string) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	if len(raw) == 0 || raw[0] == nil || *raw[0] == "" {
		return nil, errors.New("argv[0] must be a non-empty string")
	}
	argv := make([]string, len(raw))
	for i, a := range raw {
		if a == nil {
			return nil, fmt.Errorf("argv[%d] must not be null", i)
		}
		if strings.ContainsRune(*a, 0) {
			return nil, fmt.Errorf("argv[%d] contains a NUL byte", i)
		}
		argv[i] = *a
	}
	return argv, nil
}

// argvContent is what /command/status reports as a command's content.
func argvContent(argv []string) string {
	b, _ := json.Marshal(argv)
	return string(b)
}

// lookPath finds name as exec.LookPath does, but on the PATH of env (the
// request's environment) rather than the agent's own. A name with a slash
// is used as is (relative to the command's directory): exec then reports a
// missing or non-executable file.
func lookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, _ := lookupEnv(env, "PATH")
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}
