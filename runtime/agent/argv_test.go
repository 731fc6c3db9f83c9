//go:build linux

package agent

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCommandArgv: argv runs the program directly (no shell: quotes, $ and
// ; are plain bytes), found on the request's PATH; background status
// reports the JSON argv; bad argvs are 400 as in execd.
func TestCommandArgv(t *testing.T) {
	a := newTestAgent(t)
	res := a.run(t, "/command", map[string]any{"argv": []string{"printf", "%s|", "a b", "$HOME", "'q'; echo no"}})
	if code := res.exitCode(t); code != "0" || !slices.Equal(res.stdout, []string{"a b|$HOME|'q'; echo no|"}) {
		t.Errorf("printf: exit %s, stdout %q", code, res.stdout)
	}

	// PATH is the request's: a program only on it is found.
	bin := filepath.Join(a.dir, "bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "only-here"), []byte("#!/bin/sh\necho found \"$1\"\nexit 3\n"), 0o755)
	res = a.run(t, "/command", map[string]any{"argv": []string{"only-here", "x y"}, "envs": map[string]string{"PATH": bin + ":/usr/bin:/bin"}})
	if code := res.exitCode(t); code != "3" || !slices.Equal(res.stdout, []string{"found x y"}) {
		t.Errorf("only-here: exit %s, stdout %q", code, res.stdout)
	}
	if res := a.run(t, "/command", map[string]any{"argv": []string{"only-here"}}); res.events[len(res.events)-1].Type != evError {
		t.Errorf("a program not on the agent's PATH ran: %+v", res.events)
	}

	res = a.run(t, "/command", map[string]any{"argv": []string{"sh", "-c", "exit 0"}, "background": true})
	id := res.events[0].Text
	eventually(t, "background argv to finish", func() bool { return !a.status(t, id).Running })
	if st := a.status(t, id); st.Content != `["sh","-c","exit 0"]` || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Errorf("status %+v", st)
	}

	for _, body := range []map[string]any{
		{"argv": []string{}},
		{"argv": []string{""}},
		{"argv": []any{"echo", nil}},
		{"argv": []string{"echo", "a\x00b"}},
		{"argv": []string{"echo"}, "command": "echo"},
		{},
	} {
		wantError(t, a.post(t, "/command", body), http.StatusBadRequest, codeInvalidRequest)
	}
}
