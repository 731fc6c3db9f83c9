//go:build linux

package agent

import (
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// setEnvCommand is the command the SDKs' commands.setEnv (1.1.1) sends:
// it appends KEY='value', or KEY="escaped" for a value with a single
// quote, to $EXECD_ENVS.
func setEnvCommand(key, value string) string {
	entry := key + "='" + value + "'"
	if strings.Contains(value, "'") {
		r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
		entry = key + `="` + r.Replace(value) + `"`
	}
	quoted := "'" + strings.ReplaceAll(entry, "'", `'\''`) + "'"
	return `if [ -z "${EXECD_ENVS:-}" ]; then printf '%s\n' 'EXECD_ENVS is not set' >&2; exit 1; fi` + "\n" +
		`mkdir -p "$(dirname "$EXECD_ENVS")"` + "\n" +
		`printf '%s\n' ` + quoted + ` >> "$EXECD_ENVS"`
}

// TestEnvFileSetEnv: values written as the SDKs' setEnv does reach every
// later command byte for byte, the last write wins, a bash session sees
// what was written before it was created, and cwd expands with them.
func TestEnvFileSetEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dir", "envs")
	t.Setenv(envFileVar, file)
	t.Setenv("SANDBOX_HOME", "/home/x")
	a := newTestAgent(t)
	values := map[string]string{
		"PLAIN":    "plain text",
		"DOLLARS":  "$HOME and ${HOME} stay",
		"LINES":    "line1\nline2\n\nend\n",
		"EQUALS":   "a=b=c",
		"QUOTE":    "it's fine",
		"ESCAPES":  "it's \"q\"\ttab \\ back\rcr",
		"EMPTY":    "",
		"BACKSLSH": `tab\tand \"quotes\" \\`,
	}
	for k, v := range values {
		if res := a.run(t, "/command", map[string]any{"command": setEnvCommand(k, v)}); res.exitCode(t) != "0" {
			t.Fatalf("setEnv %s: stderr %q", k, res.stderr)
		}
	}
	read := func(path, key string) string {
		t.Helper()
		res := a.run(t, path, map[string]any{"command": `printf %s "${` + key + `-unset}" | base64 | tr -d '\n'`})
		b, err := base64.StdEncoding.DecodeString(strings.Join(res.stdout, ""))
		if err != nil {
			t.Fatalf("%s: %v (stdout %q)", key, err, res.stdout)
		}
		return string(b)
	}
	for k, v := range values {
		if got := read("/command", k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// Double quotes expand $NAME, last write wins.
	a.run(t, "/command", map[string]any{"command": setEnvCommand("PLAIN", "it's $SANDBOX_HOME")})
	if got := read("/command", "PLAIN"); got != "it's /home/x" {
		t.Errorf("PLAIN after a second write = %q", got)
	}
	sid := decode[map[string]string](t, a.post(t, "/session", nil), 200)["session_id"]
	a.run(t, "/command", map[string]any{"command": setEnvCommand("LATER", "after the session")})
	if got := read("/session/"+sid+"/run", "PLAIN"); got != "it's /home/x" {
		t.Errorf("session: PLAIN = %q", got)
	}
	if got := read("/session/"+sid+"/run", "LATER"); got != "unset" {
		t.Errorf("session: LATER = %q, want unset (the session snapshots the file)", got)
	}
	os.MkdirAll(filepath.Join(a.dir, "cwd"), 0o755)
	a.run(t, "/command", map[string]any{"command": setEnvCommand("WORK", filepath.Join(a.dir, "cwd"))})
	if res := a.run(t, "/command", map[string]any{"command": "pwd", "cwd": "$WORK"}); !slices.Equal(res.stdout, []string{filepath.Join(a.dir, "cwd")}) {
		t.Errorf("cwd $WORK: %q", res.stdout)
	}
}

func TestParseEnvFile(t *testing.T) {
	base := []string{"HOME=/root", "KEEP=1", "OVER=old"}
	tests := []struct {
		file string
		want []string
	}{
		{"", base},
		{"# comment\n\n  \nOVER=new\nexport A = x\nB=  spaced value  \n", []string{"HOME=/root", "KEEP=1", "OVER=new", "B=spaced value"}},
		{"A='multi\nline' trailing ignored\nB=2", append(slices.Clone(base), "A=multi\nline", "B=2")},
		{`A="$HOME/${KEEP}/$NOPE/$/\$HOME/\q"` + "\nB=\"$A\"", append(slices.Clone(base), `A=/root/1//$/$HOME/\q`, `B=/root/1//$/$HOME/\q`)},
		{"A='closes\nB=2\nC='x'", append(slices.Clone(base), "A=closes\nB=2\nC=")},
		{"B=2\nA='unclosed\nC=3", append(slices.Clone(base), "B=2", "C=3")},
		{"A=\"unclosed\nB=2\nA=3", append(slices.Clone(base), "B=2", "A=3")},
		{"1A=x\nA-B=y\nnoequals\nA=1\nA=2", append(slices.Clone(base), "A=2")},
	}
	for _, tt := range tests {
		if got := parseEnvFile(tt.file, base); !slices.Equal(got, tt.want) {
			t.Errorf("%q:\n got %q\nwant %q", tt.file, got, tt.want)
		}
	}
	// Quotes pair up across lines; the last one does not close.
	if got := parseEnvFile(strings.Repeat("A='x\n", 200001), nil); !slices.Equal(got, []string{"A=x\nA="}) {
		t.Errorf("many quotes: %q", got)
	}
}

// TestEnvFileUntrusted: an env file that another user could have written
// (writable by group or others, owned by someone else, or a symlink) is
// not applied: its variables would run in everyone's commands.
func TestEnvFileUntrusted(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("X=trusted\n"), 0o644)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("X=other\n"), 0o644)
	if err := os.Chown(other, 4242, 4242); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	writable := filepath.Join(dir, "writable")
	os.WriteFile(writable, []byte("X=writable\n"), 0o644)
	os.Chmod(writable, 0o666)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	for path, want := range map[string]string{good: "trusted", other: "unset", writable: "unset", link: "unset", dir: "unset"} {
		t.Setenv(envFileVar, path)
		got := "unset"
		if v, ok := lookupEnv(commandEnv(slog.New(slog.DiscardHandler)), "X"); ok {
			got = v
		}
		if got != want && !(path == other && os.Geteuid() != 0) {
			t.Errorf("%s: X = %q, want %q", filepath.Base(path), got, want)
		}
	}
}
