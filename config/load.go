package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables read by Load and ResolvePath, named as upstream names them.
const (
	envConfigPath = "SANDBOX_CONFIG_PATH"
	envAPIKey     = "OPENSANDBOX_SERVER_API_KEY"
	envInsecure   = "OPENSANDBOX_INSECURE_SERVER" // "YES" exactly, as upstream
)

// DefaultPath is the configuration file used when neither a flag nor the environment names
// one; it is the same file opensandbox-server reads.
const DefaultPath = "~/.sandbox.toml"

// file is the document's schema: Config plus upstream keys that fill a Config field.
type file struct {
	Config
	SecureRuntime struct {
		DockerRuntime string `toml:"docker_runtime"`
	} `toml:"secure_runtime"`
}

// ResolvePath returns the configuration file to load: flagPath if set, else env
// SANDBOX_CONFIG_PATH, else DefaultPath, with ~ expanded. explicit reports whether the
// operator named the file, i.e. whether its absence is an error.
func ResolvePath(flagPath string) (path string, explicit bool) {
	path, explicit = DefaultPath, false
	if flagPath != "" {
		path, explicit = flagPath, true
	} else if p := os.Getenv(envConfigPath); p != "" {
		path, explicit = p, true
	}
	if p, err := expandHome(path); err == nil {
		path = p
	} // else Load reports the failure with the path as given
	return path, explicit
}

// Load returns the configuration in the file at path (~ expanded) over the defaults, with
// environment overrides applied, validated. Load("") reads no file. A file that does not
// exist is an error matching fs.ErrNotExist; a caller whose path was not explicit (see
// ResolvePath) falls back to Load("") then.
//
// Keys sandboxd does not use, such as upstream's [egress] or runtime.execd_image, are
// accepted and listed in Config.Ignored. A value of the wrong type is an error naming the
// key and its line.
func Load(path string) (Config, error) {
	c := Default()
	if path != "" {
		p, err := expandHome(path)
		if err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		f := file{Config: c}
		ignored, err := decode(string(data), &f)
		if err != nil {
			return Config{}, fmt.Errorf("config %s: %w", p, err)
		}
		c = f.Config
		c.Path, c.Ignored = p, ignored
		if err := mergeHardening(&c, string(data)); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", p, err)
		}
		if r := f.SecureRuntime.DockerRuntime; r != "" {
			if c.Docker.OCIRuntime != "" && c.Docker.OCIRuntime != r {
				return Config{}, fmt.Errorf("config %s: docker.runtime %q and secure_runtime.docker_runtime %q disagree; set one",
					p, c.Docker.OCIRuntime, r)
			}
			c.Docker.OCIRuntime = r
		}
	}
	if k := os.Getenv(envAPIKey); k != "" {
		c.Server.APIKey = k
	}
	if os.Getenv(envInsecure) == "YES" {
		c.Server.Insecure = true
	}
	if err := c.normalize(); err != nil {
		return Config{}, c.wrap(err)
	}
	if err := c.validate(); err != nil {
		return Config{}, c.wrap(err)
	}
	c.Log.Level = strings.ToUpper(c.Log.Level)
	return c, nil
}

// wrap prefixes each of the (possibly joined) errors with the configuration file.
func (c Config) wrap(err error) error {
	where := "config"
	if c.Path != "" {
		where += " " + c.Path
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	wrapped := make([]error, len(errs))
	for i, e := range errs {
		wrapped[i] = fmt.Errorf("%s: %w", where, e)
	}
	return errors.Join(wrapped...)
}

// normalize puts values into the one form the rest of sandboxd expects.
func (c *Config) normalize() error {
	c.Server.Host = strings.TrimSuffix(strings.TrimPrefix(c.Server.Host, "["), "]")
	dir, err := expandHome(c.Store.Dir)
	if err != nil {
		return fmt.Errorf("store.dir: %w", err)
	}
	c.Store.Dir = dir
	for i, p := range c.Storage.AllowedHostPaths {
		p, err := expandHome(p)
		if err != nil {
			return fmt.Errorf("storage.allowed_host_paths[%d]: %w", i, err)
		}
		c.Storage.AllowedHostPaths[i] = filepath.Clean(p)
	}
	if c.Kubernetes.Kubeconfig, err = expandHome(c.Kubernetes.Kubeconfig); err != nil {
		return fmt.Errorf("kubernetes.kubeconfig_path: %w", err)
	}
	for plat, p := range c.Runtime.AgentBinaries {
		p, err := expandHome(p)
		if err != nil {
			return fmt.Errorf("runtime.agent_binaries.%s: %w", plat, err)
		}
		c.Runtime.AgentBinaries[plat] = p
	}
	return nil
}

// expandHome replaces a leading "~" or "~/" with the user's home directory. Other paths,
// including "~user/...", are returned unchanged.
func expandHome(p string) (string, error) {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %s: %w", p, err)
	}
	return filepath.Join(home, p[1:]), nil
}
