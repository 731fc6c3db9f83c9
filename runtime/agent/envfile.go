//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"syscall"
)

// The env file of execd 1.1 ($EXECD_ENVS): variables that every later
// command and bash session gets (a session reads it when created). The SDKs' commands.setEnv (1.1.1)
// appends KEY='value' (a literal, which may span lines) or, for a value
// with a single quote, KEY="value" with \\ \" \n \r \t escapes and $NAME
// expanded; the last write of a key wins.

const (
	envFileVar = "EXECD_ENVS"
	// defaultEnvFile is used when the sandbox's environment does not name
	// one (upstream's bootstrap uses /opt/opensandbox/.env; /tmp is
	// writable for any user, also with a read-only root filesystem).
	defaultEnvFile = "/tmp/.opensandbox/.env"
	maxEnvFile     = 4 << 20
)

// commandEnv is the environment commands start from: the agent's own
// (the container's), EXECD_ENVS naming the env file, and the file's
// variables, read now.
func commandEnv(log *slog.Logger) []string {
	env := os.Environ()
	path, ok := lookupEnv(env, envFileVar)
	if !ok {
		path = defaultEnvFile
		env = append(env, envFileVar+"="+path)
	}
	data, err := readEnvFile(path)
	if err != nil {
		log.Warn("env file not applied", "path", path, "err", err)
		return env
	}
	return parseEnvFile(data, env)
}

// readEnvFile reads the env file, if there is one. Its variables go into
// the commands of every user (LD_PRELOAD would run code as each of them),
// so it is used only if it is a regular file that only its owner can
// write, that owner being root or the agent's own user: the default path is
// in /tmp, where any user of the sandbox could put a file first. The checks
// are on the file opened, so it cannot be swapped after them.
func readEnvFile(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return "", errors.New("not a regular file")
	}
	if (st.Uid != 0 && int(st.Uid) != os.Geteuid()) || st.Mode&0o022 != 0 {
		return "", fmt.Errorf("owned by uid %d with mode %o: only root or uid %d may write it", st.Uid, st.Mode&0o777, os.Geteuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxEnvFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxEnvFile {
		return "", errors.New("larger than 4 MiB")
	}
	return string(b), nil
}

// parseEnvFile applies the entries of an env file to env: one KEY=VALUE
// per entry, # comments and blank lines skipped, an optional "export "
// prefix; a line that is no entry is skipped, and so is an entry whose
// quote does not close. Linear in the size of the file.
func parseEnvFile(src string, env []string) []string {
	vars := map[string]string{}
	var order []string
	lookup := func(k string) (string, bool) {
		if v, ok := vars[k]; ok {
			return v, true
		}
		return lookupEnv(env, k)
	}
	// nextLine is the start of the line after the one holding src[i].
	nextLine := func(i int) int {
		if j := strings.IndexByte(src[i:], '\n'); j >= 0 {
			return i + j + 1
		}
		return len(src)
	}
	// Once a quote has no closing one, no later quote of that kind can.
	unclosed := map[byte]bool{}
	for pos := 0; pos < len(src); {
		next := nextLine(pos)
		start := pos
		for start < next && (src[start] == ' ' || src[start] == '\t') {
			start++
		}
		if strings.HasPrefix(src[start:next], "export ") {
			start += len("export ")
		}
		n := nameLen(src[start:next])
		v := start + n + 1 // where the value starts
		if n == 0 || v > next || src[v-1] != '=' {
			pos = next // blank, comment or not an entry
			continue
		}
		key := src[start : start+n]
		value := strings.TrimSpace(src[v:next])
		if v < len(src) && (src[v] == '\'' || src[v] == '"') {
			quote := src[v]
			length, ok := 0, !unclosed[quote]
			if ok && quote == '\'' { // a literal, possibly over several lines
				length = strings.IndexByte(src[v+1:], '\'')
				ok = length >= 0
				if ok {
					value = src[v+1 : v+1+length]
				}
			} else if ok {
				value, length, ok = doubleQuoted(src[v+1:], lookup)
			}
			if !ok {
				unclosed[quote] = true
				pos = next
				continue
			}
			next = nextLine(v + 1 + length) // the rest of the closing line is ignored
		}
		pos = next
		if _, seen := vars[key]; !seen {
			order = append(order, key)
		}
		vars[key] = value
	}
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !hasKey(vars, k) {
			out = append(out, kv)
		}
	}
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// nameLen is the length of the variable name that s starts with.
func nameLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return i
	}
	return len(s)
}

// doubleQuoted reads a double-quoted value up to its closing quote, with
// its escapes and $NAME / ${NAME} expanded; it returns the value and the
// closing quote's index in s.
func doubleQuoted(s string, lookup func(string) (string, bool)) (string, int, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i, true
		case '\\':
			if i+1 == len(s) {
				return "", 0, false
			}
			i++
			switch e := s[i]; e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '"', '\\', '$':
				b.WriteByte(e)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case '$':
			name, skip := "", 0
			if strings.HasPrefix(s[i+1:], "{") {
				if j := strings.IndexByte(s[i+2:], '}'); j > 0 && nameLen(s[i+2:]) == j {
					name, skip = s[i+2:i+2+j], j+2
				}
			} else if n := nameLen(s[i+1:]); n > 0 {
				name, skip = s[i+1:i+1+n], n
			}
			if name == "" {
				b.WriteByte('$')
				continue
			}
			v, _ := lookup(name)
			b.WriteString(v)
			i += skip
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}
