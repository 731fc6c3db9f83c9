package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime/hostpath"
	"github.com/sandboxd/sandboxd/runtime/runtimetest"
)

// FuzzParseQuantity checks ParseMemory and ParseCPU: no panic, results in
// range, and a parsed memory size reads back the same as plain bytes.
func FuzzParseQuantity(f *testing.F) {
	for _, s := range []string{"512Mi", "2Gi", "1G", "100kb", "1", "0.5", "500m", "1e3", "", " 1 Ki ", "1.5.5", "-1", "NaN", "Inf", "9999999999999999999Ti", "0.0000001", "1025", "0.0009"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, ok := ParseMemory(s); ok {
			if n < 1 || n > math.MaxInt64/2 {
				t.Fatalf("ParseMemory(%q) = %d, out of range", s, n)
			}
			if back, ok := ParseMemory(fmt.Sprint(n)); !ok || back != n {
				t.Fatalf("ParseMemory(%q) = %d, but %d reads back as %d, %v", s, n, n, back, ok)
			}
		}
		if n, ok := ParseCPU(s); ok && (n < 1e6 || n > 1024e9) {
			t.Fatalf("ParseCPU(%q) = %d, out of range", s, n)
		}
	})
}

// FuzzParseResources checks that resourceLimits either parse into sane
// limits or fail with a 400 naming the parameter.
func FuzzParseResources(f *testing.F) {
	f.Add("1", "512Mi", "1", true, true, true)
	f.Add("", "", "all", false, false, true)
	f.Add("abc", "5Mi", "-1", true, true, true)
	f.Add("0", "6Mi", " 2 ", true, true, false)
	f.Add("", "", "0", true, true, true) // blank limits keep the defaults
	f.Fuzz(func(t *testing.T, cpu, mem, gpu string, hasCPU, hasMem, hasGPU bool) {
		limits := map[string]string{}
		if hasCPU {
			limits["cpu"] = cpu
		}
		if hasMem {
			limits["memory"] = mem
		}
		if hasGPU {
			limits["gpu"] = gpu
		}
		r, err := ParseResources(limits, "1", "2Gi")
		if err != nil {
			if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Code != CodeInvalidParameter {
				t.Fatalf("ParseResources(%v) error %v, want a 400 %s", limits, err, CodeInvalidParameter)
			}
			return
		}
		if r.NanoCPUs < 1e6 || r.MemoryBytes < 6<<20 || r.GPUs < -1 {
			t.Fatalf("ParseResources(%v) = %+v, out of range", limits, r)
		}
	})
}

// FuzzParseMetadataFilter checks the list filter parser: no panic, errors
// are 400 INVALID_METADATA_FORMAT, and a parsed filter written back as a
// query string parses to the same map.
func FuzzParseMetadataFilter(f *testing.F) {
	for _, s := range []string{"", "a=b", "a=b&c=d", "a", "=b", "a=", "a=b=c", "%zz=1", "a%3Db=c", "a=b&&c=d", "k=v&k=w", "+=+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		md, err := ParseMetadataFilter(s)
		if err != nil {
			if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Code != CodeInvalidMetaFormat {
				t.Fatalf("ParseMetadataFilter(%q) error %v, want a 400 %s", s, err, CodeInvalidMetaFormat)
			}
			return
		}
		var parts []string
		for k, v := range md {
			if k == "" {
				t.Fatalf("ParseMetadataFilter(%q) has an empty key", s)
			}
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(v))
		}
		back, err := ParseMetadataFilter(strings.Join(parts, "&"))
		if err != nil || !maps.Equal(back, md) {
			t.Fatalf("ParseMetadataFilter(%q) = %v, written back parses to %v, %v", s, md, back, err)
		}
	})
}

// labelChars is what a valid label name or value may hold.
var labelChars = regexp.MustCompile(`^[A-Za-z0-9._-]*$`)

// FuzzLabel checks the metadata (label) validators against each other and
// against the properties Docker labels rely on.
func FuzzLabel(f *testing.F) {
	for _, s := range [][2]string{{"team", "a"}, {"example.com/team", ""}, {"opensandbox.io/id", "x"}, {"a/b/c", "d"}, {"-a", "a-"}, {"A.B", "a_b"}, {"/a", "b"}, {"Example.com/a", "b"}, {strings.Repeat("k", 64), strings.Repeat("v", 64)}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		keyOK, valueOK := validateLabelKey(k) == "", validateLabelValue(v) == ""
		if keyOK {
			prefix, name, hasPrefix := strings.Cut(k, "/")
			if !hasPrefix {
				name, prefix = prefix, ""
			}
			if len(name) < 1 || len(name) > 63 || len(prefix) > 253 || !labelChars.MatchString(name) || strings.ContainsAny(prefix, "/_ ") || prefix != strings.ToLower(prefix) {
				t.Fatalf("validateLabelKey accepted %q", k)
			}
		}
		if valueOK && (len(v) > 63 || !labelChars.MatchString(v)) {
			t.Fatalf("validateLabelValue accepted %q", v)
		}
		err := validateMetadata(map[string]string{k: v}, CodeReservedMetadata)
		reserved := strings.HasPrefix(k, reservedPrefix)
		if (err == nil) != (keyOK && valueOK && !reserved) {
			t.Fatalf("validateMetadata({%q: %q}) = %v; key ok %v, value ok %v, reserved %v", k, v, err, keyOK, valueOK, reserved)
		}
	})
}

// FuzzCheckHostPath checks the bind-mount gate on a temp tree with an
// allowed prefix, a sibling outside it, a symlink escaping it and a state
// directory inside it: an accepted path resolves into the prefix and out
// of the state directory, and no refused path is ever created.
func FuzzCheckHostPath(f *testing.F) {
	root := f.TempDir()
	allowed, outside := filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	state := filepath.Join(allowed, "state")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(allowed, "in"), filepath.Join(root, "alias")); err != nil {
		f.Fatal(err)
	}
	cfg := config.Default()
	cfg.Store.Dir = state
	cfg.Storage.AllowedHostPaths = []string{allowed}
	store := openTestStore(f, state)
	rt := runtimetest.New(time.Now)
	if err := rt.AllowHostPaths(allowed); err != nil {
		f.Fatal(err)
	}
	m := &Sandboxes{deps: &deps{cfg: cfg, store: store, rt: rt}}

	for _, rel := range []string{"allowed", "allowed/new/dir", "allowed/escape", "allowed/escape/x", "allowed/state", "allowed/state/x", "allowed/../outside/y", "allowed//z", "allowed/", "outside/q", "alias", "alias/w", "allowed2"} {
		f.Add("ROOT/" + rel)
	}
	for _, p := range []string{"/", "/etc", "/var/run/docker.sock", "/proc/self", "relative", "", "/a\x00b"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		p = strings.ReplaceAll(p, "ROOT", root)
		_, statErr := os.Lstat(p)
		existed := statErr == nil
		mnt, err := m.checkHostPath(context.Background(), "v", p)
		got, prefix := mnt.Source, mnt.Beneath
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Code != CodeVolInvalidHostPath && e.Code != CodeVolHostNotAllowed) {
				t.Fatalf("checkHostPath(%q) error %v, want a VOLUME:: refusal", p, err)
			}
			if _, err := os.Lstat(p); err == nil && !existed {
				t.Fatalf("checkHostPath(%q) refused the path but created it", p)
			}
		} else {
			// Nothing is created by the check (the runtime creates below
			// prefix without following symlinks), so judge what exists.
			real, err := hostpath.Resolve(got)
			if err != nil {
				t.Fatalf("checkHostPath(%q) = %q, which does not resolve: %v", p, got, err)
			}
			if !hostpath.Within(real, allowed) || hostpath.Within(real, state) || hostpath.Within(state, real) {
				t.Fatalf("checkHostPath(%q) = %q (really %q), outside %s or over the state dir", p, got, real, allowed)
			}
			if prefix != allowed || !hostpath.Within(got, prefix) {
				t.Fatalf("checkHostPath(%q) = %q below %q, want below %s", p, got, prefix, allowed)
			}
			if _, err := os.Lstat(p); err == nil && !existed {
				t.Fatalf("checkHostPath(%q) created the path", p)
			}
		}
		entries, err := os.ReadDir(outside)
		if err != nil || len(entries) != 0 {
			t.Fatalf("after checkHostPath(%q), %s has %d entries (%v)", p, outside, len(entries), err)
		}
	})
}

// FuzzParseHardening checks the hardening extensions: errors are 400s,
// accepted values never loosen the server's settings.
func FuzzParseHardening(f *testing.F) {
	f.Add("true", "1000:1000", true, true, false, "")
	f.Add("false", "root", true, false, true, "1000")
	f.Add("maybe", "a b", true, true, false, "")
	f.Add("1", "", false, true, false, "nobody")
	f.Fuzz(func(t *testing.T, ro, user string, hasRO, hasUser, cfgRO bool, cfgUser string) {
		ext := map[string]string{}
		if hasRO {
			ext[ExtReadOnlyRootfs] = ro
		}
		if hasUser {
			ext[ExtUser] = user
		}
		d := defaultsFrom(config.Config{Docker: config.Docker{Hardening: config.Hardening{ReadOnlyRootfs: cfgRO, User: cfgUser}}})
		h, err := d.parseHardening(ext)
		if err != nil {
			if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Code != CodeInvalidParameter {
				t.Fatalf("parseHardening(%v) error %v, want a 400", ext, err)
			}
			return
		}
		if cfgRO && !h.readOnlyRootfs {
			t.Fatalf("parseHardening(%v) made the configured read-only root writable", ext)
		}
		if cfgUser != "" && h.user != cfgUser {
			t.Fatalf("parseHardening(%v) replaced the configured user %q with %q", ext, cfgUser, h.user)
		}
		if hasUser && !userSpec.MatchString(h.user) {
			t.Fatalf("parseHardening(%v) accepted the user %q", ext, h.user)
		}
	})
}
