//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// execd 1.1.1's changes (reference upstream-1.1.1.md §6).

const sdk111 = "OpenSandbox-Python-SDK/1.1.1"

func TestLineSplitterKeep(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"lf", []string{"a\nb\n"}, []string{"a\n", "b\n"}},
		{"crlf in one line", []string{"a\r\nb\r\n"}, []string{"a\r\n", "b\r\n"}},
		{"cr alone", []string{"a\rb\r"}, []string{"a\r", "b\r"}},
		{"blank lines", []string{"a\n\n\nb\n"}, []string{"a\n", "\n", "\n", "b\n"}},
		{"cr cr lf", []string{"a\r\r\nb"}, []string{"a\r", "\r\n", "b"}},
		{"lf cr", []string{"a\n\rb"}, []string{"a\n", "\r", "b"}},
		{"final fragment", []string{"a\nrest"}, []string{"a\n", "rest"}},
		{"crlf split across reads", []string{"a\r", "\nb"}, []string{"a\r\n", "b"}},
		{"cr then text across reads", []string{"a\r", "b\n"}, []string{"a\r", "b\n"}},
		{"cr at the very end", []string{"a\r"}, []string{"a\r"}},
		{"line split across reads", []string{"ab", "c", "d\ne"}, []string{"abcd\n", "e"}},
		{"empty reads", []string{"", "a", "", "\r", "", "\n", ""}, []string{"a\r\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitAll(tt.chunks); !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	// Whatever the reads, the lines joined are the bytes written.
	in := "x\r\n\r\n\ry\n\n\rz\r\r\n\nend"
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			lines := splitAll([]string{in[:i], in[i:j], in[j:]})
			if got := strings.Join(lines, ""); got != in {
				t.Fatalf("cut at %d, %d: joined %q, want %q", i, j, got, in)
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasSuffix(l, "\n") && !strings.HasSuffix(l, "\r") {
					t.Fatalf("cut at %d, %d: line %q has no terminator", i, j, l)
				}
			}
		}
	}
}

func splitAll(chunks []string) []string {
	sp := lineSplitter{keep: true}
	var got []string
	for _, c := range chunks {
		p := []byte(c)
		for {
			line, rest, ok := sp.next(p)
			if !ok {
				break
			}
			got = append(got, string(line))
			p = rest
		}
	}
	if rem := sp.flush(); len(rem) > 0 {
		got = append(got, string(rem))
	}
	return got
}

func TestKeepsLineEndings(t *testing.T) {
	for ua, want := range map[string]bool{
		"OpenSandbox-Python-SDK/1.1.0":     true,
		"OpenSandbox-JS-SDK/1.1.1":         true,
		"opensandbox-go-sdk/1.2.0-rc1":     true,
		"OpenSandbox-Kotlin-SDK/2.0":       true,
		"OpenSandbox-CSharp-SDK/1.10.3":    true,
		"OpenSandbox-JS-SDK/0.1.11":        false,
		"OpenSandbox-Python-SDK/1.0.9":     false,
		"OpenSandbox-Python-SDK/1":         false,
		"OpenSandbox-Python-SDK/x.y":       false,
		"python-httpx/0.28.1":              false,
		"curl/8.5.0":                       false,
		"":                                 false,
		"Mozilla OpenSandbox-JS-SDK/1.1.0": false,
	} {
		r, _ := http.NewRequest(http.MethodPost, "/command", nil)
		r.Header.Set("User-Agent", ua)
		if got := keepsLineEndings(r); got != want {
			t.Errorf("%q: %v, want %v", ua, got, want)
		}
	}
}

// runAs posts a command with a User-Agent and reads its whole stream.
func (a *testAgent) runAs(t *testing.T, ua, path string, body any) result {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, a.url+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", ua)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", path, resp.Status)
	}
	return readStream(t, resp)
}

// #2033: a 1.1 SDK gets events whose texts joined are the output's bytes;
// other clients keep one stripped line per event.
func TestCommandLineEndings(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	cmd := `printf 'a\r\nb\n\nc'; printf 'e1\r\n\ne2' >&2`
	res := a.runAs(t, sdk111, "/command", map[string]any{"command": cmd})
	if got := strings.Join(res.stdout, ""); got != "a\r\nb\n\nc" {
		t.Errorf("1.1 SDK: joined stdout %q (events %q)", got, res.stdout)
	}
	if got := strings.Join(res.stderr, ""); got != "e1\r\n\ne2" {
		t.Errorf("1.1 SDK: joined stderr %q (events %q)", got, res.stderr)
	}
	id := a.newSession(t, nil)
	res = a.runAs(t, sdk111, "/session/"+id+"/run", map[string]any{"command": cmd})
	if got := strings.Join(res.stdout, ""); got != "a\r\nb\n\nc" {
		t.Errorf("1.1 SDK, session: joined stdout %q (events %q)", got, res.stdout)
	}
	res = a.runAs(t, "OpenSandbox-JS-SDK/0.1.11", "/command", map[string]any{"command": cmd})
	if !slices.Equal(res.stdout, []string{"a", "b", "\n", "c"}) || !slices.Equal(res.stderr, []string{"e1", "\n", "e2"}) {
		t.Errorf("0.1 SDK: stdout %q stderr %q, want the stripped lines", res.stdout, res.stderr)
	}
}

// #2074: processes started by a background command that has finished keep
// running; an interrupt of a running one still kills its whole group.
func TestBackgroundChildrenSurvive(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	pidFile := filepath.Join(a.dir, "bgpid")
	res := a.run(t, "/command", map[string]any{"command": "sleep 300 & echo $! > " + pidFile, "background": true})
	id := res.events[0].Text
	eventually(t, "background command to finish", func() bool { return !a.status(t, id).Running })
	pid := readPid(t, pidFile)
	defer killPid(pid)
	time.Sleep(100 * time.Millisecond) // what would kill it comes right after the finish
	if !alive(pid) {
		t.Fatalf("the child %d of a finished background command died", pid)
	}

	res = a.run(t, "/command", map[string]any{"command": "sleep 300 & echo $! > " + pidFile + "; wait", "background": true})
	id = res.events[0].Text
	eventually(t, "the child's pid", func() bool { b, _ := os.ReadFile(pidFile); return len(b) > 0 && readPid(t, pidFile) != pid })
	child := readPid(t, pidFile)
	if resp := a.do(t, http.MethodDelete, "/command?id="+id, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("interrupt: %s", resp.Status)
	}
	eventually(t, "the interrupted command's child to die", func() bool { return processGone(child) })
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

// #2079: a session run's timeout kills its whole process group: the run
// ends at the deadline even when a child holds its output open.
func TestSessionTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	id := a.newSession(t, nil)
	start := time.Now()
	res := a.run(t, "/session/"+id+"/run", map[string]any{"command": "sleep 30 & echo $!; wait", "timeout": 500})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the run took %v, past its 500 ms timeout", took)
	}
	if code := res.exitCode(t); code != "-1" {
		t.Errorf("exit %s, want -1", code)
	}
	if len(res.stdout) != 1 {
		t.Fatalf("stdout %q, want the child's pid", res.stdout)
	}
	pid, _ := strconv.Atoi(res.stdout[0])
	eventually(t, "the session's child to die", func() bool { return processGone(pid) })
}
