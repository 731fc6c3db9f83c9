package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestWriteExampleLoadsBack(t *testing.T) {
	for _, example := range []string{"", "docker"} {
		t.Run(example, func(t *testing.T) {
			home := isolate(t)
			path := filepath.Join(t.TempDir(), "sub", "sandbox.toml")
			key, err := WriteExample(path, example, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(key) < 43 {
				t.Errorf("key %q is shorter than 32 bytes of base64", key)
			}
			if m := fileMode(t, path); m != 0o600 {
				t.Errorf("mode %o, want 600", m)
			}
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if c.Server.APIKey != key {
				t.Errorf("loaded key %q, want %q", c.Server.APIKey, key)
			}
			if len(c.Ignored) != 0 {
				t.Errorf("example has ignored keys %q", c.Ignored)
			}
			// The example states the defaults; apart from the key it must not differ.
			want := Default()
			want.Server.APIKey = key
			want.Store.Dir = filepath.Join(home, ".sandboxd")
			want.Path = path
			// Written as [] in the example:
			want.Server.APIKeys, want.Server.CORSOrigins = []string{}, []string{}
			want.Storage.AllowedHostPaths, want.Storage.AllowedVolumes = []string{}, []string{}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("example loads as\n%+v\nwant\n%+v", c, want)
			}
		})
	}
}

func TestWriteExampleOverwrite(t *testing.T) {
	isolate(t)
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	if err := os.WriteFile(path, []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := WriteExample(path, "docker", false)
	if err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("error %v, want refusal mentioning --force", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "# mine\n" {
		t.Errorf("refused write changed the file: %q", b)
	}

	key, err := WriteExample(path, "docker", true)
	if err != nil {
		t.Fatal(err)
	}
	if m := fileMode(t, path); m != 0o600 {
		t.Errorf("mode after --force %o, want 600", m)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.APIKey != key {
		t.Errorf("loaded key %q, want %q", c.Server.APIKey, key)
	}
}

func TestWriteExampleFreshKeys(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	k1, err1 := WriteExample(filepath.Join(dir, "a.toml"), "", false)
	k2, err2 := WriteExample(filepath.Join(dir, "b.toml"), "", false)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if k1 == k2 {
		t.Errorf("two examples share the key %q", k1)
	}
}

func TestWriteExampleTilde(t *testing.T) {
	home := isolate(t)
	if _, err := WriteExample("~/.sandbox.toml", "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".sandbox.toml")); err != nil {
		t.Error(err)
	}
}

func TestWriteExampleUnknown(t *testing.T) {
	isolate(t)
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	_, err := WriteExample(path, "k8s", false)
	if err == nil || !strings.Contains(err.Error(), `"k8s"`) || !strings.Contains(err.Error(), "docker") {
		t.Errorf("error %v, want the name and the valid names", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("unknown example wrote a file")
	}
}
