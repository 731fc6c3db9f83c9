package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	goruntime "runtime"
	"strings"

	"github.com/docker/docker/client"
)

// endpoint is where the Docker engine is reached and why there.
type endpoint struct {
	Host   string // e.g. "unix:///var/run/docker.sock", "npipe:////./pipe/docker_engine"
	Source string // what chose Host, for the start-up log
	// A docker context's TLS files, each "" when absent.
	CAFile, CertFile, KeyFile string
}

// hostEnv is what endpoint discovery reads of the machine, so that the
// choices of every OS can be tested on any of them.
type hostEnv struct {
	GOOS     string
	Getenv   func(string) string
	Home     string
	Exists   func(path string) bool
	ReadFile func(path string) ([]byte, error)
}

// localHostEnv is the machine sandboxd runs on.
func localHostEnv() hostEnv {
	home, _ := os.UserHomeDir()
	return hostEnv{
		GOOS:   goruntime.GOOS,
		Getenv: os.Getenv,
		Home:   home,
		Exists: func(p string) bool {
			_, err := os.Stat(p)
			return err == nil
		},
		ReadFile: os.ReadFile,
	}
}

// join builds a path of the machine described by e, whichever OS runs
// the code.
func (e hostEnv) join(elem ...string) string {
	if e.GOOS == "windows" {
		return strings.Join(elem, `\`)
	}
	return path.Join(elem...)
}

// discoverEndpoint chooses the Docker endpoint as the docker CLI does:
// [docker] host, else DOCKER_HOST, else the docker context named by
// DOCKER_CONTEXT or by the CLI's config.json, else the platform's local
// engine: the named pipe on Windows, Docker Desktop's socket on macOS.
func discoverEndpoint(configured string, e hostEnv) (endpoint, error) {
	var ep endpoint
	switch {
	case configured != "":
		ep = endpoint{Host: configured, Source: "[docker] host"}
	case e.Getenv("DOCKER_HOST") != "":
		ep = endpoint{Host: e.Getenv("DOCKER_HOST"), Source: "DOCKER_HOST"}
	default:
		var ok bool
		var err error
		if ep, ok, err = contextEndpoint(e); err != nil {
			return endpoint{}, err
		} else if !ok {
			ep = defaultEndpoint(e)
		}
	}
	if strings.HasPrefix(ep.Host, "ssh://") {
		return endpoint{}, fmt.Errorf("docker endpoint %s (from %s): ssh:// is not supported; forward the engine's socket "+
			"(ssh -NL /tmp/docker.sock:/var/run/docker.sock HOST) and set [docker] host = \"unix:///tmp/docker.sock\"", ep.Host, ep.Source)
	}
	return ep, nil
}

// contextEndpoint reads the current docker context, if one other than
// "default" is selected. The CLI keeps a context's endpoint in
// contexts/meta/<sha256 of its name>/meta.json and its TLS files in
// contexts/tls/<same>/docker/.
func contextEndpoint(e hostEnv) (endpoint, bool, error) {
	dir := e.Getenv("DOCKER_CONFIG")
	if dir == "" {
		dir = e.join(e.Home, ".docker")
	}
	name, source := e.Getenv("DOCKER_CONTEXT"), "DOCKER_CONTEXT"
	if name == "" {
		cfgPath := e.join(dir, "config.json")
		data, err := e.ReadFile(cfgPath)
		if errors.Is(err, fs.ErrNotExist) {
			return endpoint{}, false, nil
		} else if err != nil {
			return endpoint{}, false, fmt.Errorf("read docker CLI config: %w", err)
		}
		var cfg struct {
			CurrentContext string `json:"currentContext"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return endpoint{}, false, fmt.Errorf("docker CLI config %s: %w", cfgPath, err)
		}
		name, source = cfg.CurrentContext, cfgPath
	}
	if name == "" || name == "default" {
		return endpoint{}, false, nil
	}
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	metaPath := e.join(dir, "contexts", "meta", id, "meta.json")
	data, err := e.ReadFile(metaPath)
	if err != nil {
		return endpoint{}, false, fmt.Errorf("docker context %q (from %s): %w; set [docker] host or DOCKER_HOST instead", name, source, err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host string `json:"Host"`
		} `json:"Endpoints"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return endpoint{}, false, fmt.Errorf("docker context %q: %s: %w", name, metaPath, err)
	}
	host := meta.Endpoints["docker"].Host
	if host == "" {
		return endpoint{}, false, fmt.Errorf("docker context %q: %s names no docker endpoint", name, metaPath)
	}
	ep := endpoint{Host: host, Source: fmt.Sprintf("docker context %q", name)}
	tls := e.join(dir, "contexts", "tls", id, "docker")
	for name, field := range map[string]*string{"ca.pem": &ep.CAFile, "cert.pem": &ep.CertFile, "key.pem": &ep.KeyFile} {
		if p := e.join(tls, name); e.Exists(p) {
			*field = p
		}
	}
	return ep, true, nil
}

// defaultEndpoint is the platform's local engine. On macOS the standard
// socket exists only when Docker Desktop is allowed to create it, so
// Desktop's per-user socket is tried next (and chosen when neither exists
// yet: Desktop may still be starting). Rootless Docker on Linux listens in
// $XDG_RUNTIME_DIR.
func defaultEndpoint(e hostEnv) endpoint {
	const std = "/var/run/docker.sock"
	switch e.GOOS {
	case "windows":
		return endpoint{Host: "npipe:////./pipe/docker_engine", Source: "Docker Desktop's named pipe"}
	case "darwin":
		if e.Exists(std) {
			return endpoint{Host: "unix://" + std, Source: "default socket"}
		}
		return endpoint{Host: "unix://" + e.join(e.Home, ".docker", "run", "docker.sock"), Source: "Docker Desktop's socket"}
	}
	if !e.Exists(std) {
		if xdg := e.Getenv("XDG_RUNTIME_DIR"); xdg != "" && e.Exists(e.join(xdg, "docker.sock")) {
			return endpoint{Host: "unix://" + e.join(xdg, "docker.sock"), Source: "rootless Docker's socket"}
		}
	}
	return endpoint{Host: "unix://" + std, Source: "default socket"}
}

// clientOpts turns the endpoint into Docker client options.
func (ep endpoint) clientOpts() []client.Opt {
	opts := []client.Opt{client.WithHost(ep.Host)}
	if ep.CAFile != "" || ep.CertFile != "" {
		opts = append(opts, client.WithTLSClientConfig(ep.CAFile, ep.CertFile, ep.KeyFile))
	}
	return opts
}
