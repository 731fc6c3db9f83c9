package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"
)

// fakeHost is a machine of any OS: environment variables and files.
func fakeHost(goos, home string, env map[string]string, files map[string]string) hostEnv {
	return hostEnv{
		GOOS:   goos,
		Getenv: func(k string) string { return env[k] },
		Home:   home,
		Exists: func(p string) bool { _, ok := files[p]; return ok },
		ReadFile: func(p string) ([]byte, error) {
			if data, ok := files[p]; ok {
				return []byte(data), nil
			}
			return nil, fs.ErrNotExist
		},
	}
}

func contextID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

func TestDiscoverEndpoint(t *testing.T) {
	desktop := contextID("desktop-linux")
	colima := contextID("colima")
	tests := []struct {
		name       string
		goos       string
		home       string
		configured string
		env        map[string]string
		files      map[string]string
		want       endpoint
		wantErr    string
	}{
		{
			name: "linux default socket", goos: "linux", home: "/root",
			files: map[string]string{"/var/run/docker.sock": ""},
			want:  endpoint{Host: "unix:///var/run/docker.sock", Source: "default socket"},
		},
		{
			name: "linux rootless when the system socket is absent", goos: "linux", home: "/home/u",
			env:   map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"},
			files: map[string]string{"/run/user/1000/docker.sock": ""},
			want:  endpoint{Host: "unix:///run/user/1000/docker.sock", Source: "rootless Docker's socket"},
		},
		{
			name: "config wins over everything", goos: "linux", home: "/root", configured: "tcp://10.0.0.1:2375",
			env:  map[string]string{"DOCKER_HOST": "unix:///other.sock", "DOCKER_CONTEXT": "colima"},
			want: endpoint{Host: "tcp://10.0.0.1:2375", Source: "[docker] host"},
		},
		{
			name: "DOCKER_HOST wins over contexts", goos: "darwin", home: "/Users/u",
			env:   map[string]string{"DOCKER_HOST": "unix:///tmp/d.sock"},
			files: map[string]string{"/Users/u/.docker/config.json": `{"currentContext":"desktop-linux"}`},
			want:  endpoint{Host: "unix:///tmp/d.sock", Source: "DOCKER_HOST"},
		},
		{
			name: "macOS: Docker Desktop's current context", goos: "darwin", home: "/Users/u",
			files: map[string]string{
				"/Users/u/.docker/config.json": `{"auths":{},"currentContext":"desktop-linux"}`,
				"/Users/u/.docker/contexts/meta/" + desktop + "/meta.json": `{"Name":"desktop-linux","Metadata":{},` +
					`"Endpoints":{"docker":{"Host":"unix:///Users/u/.docker/run/docker.sock","SkipTLSVerify":false}}}`,
			},
			want: endpoint{Host: "unix:///Users/u/.docker/run/docker.sock", Source: `docker context "desktop-linux"`},
		},
		{
			name: "DOCKER_CONTEXT over config.json, DOCKER_CONFIG moves the directory", goos: "darwin", home: "/Users/u",
			env: map[string]string{"DOCKER_CONTEXT": "colima", "DOCKER_CONFIG": "/cfg"},
			files: map[string]string{
				"/cfg/config.json": `{"currentContext":"desktop-linux"}`,
				"/cfg/contexts/meta/" + colima + "/meta.json": `{"Endpoints":{"docker":{"Host":"unix:///Users/u/.colima/default/docker.sock"}}}`,
			},
			want: endpoint{Host: "unix:///Users/u/.colima/default/docker.sock", Source: `docker context "colima"`},
		},
		{
			name: "a context's TLS files", goos: "linux", home: "/root",
			env: map[string]string{"DOCKER_CONTEXT": "colima"},
			files: map[string]string{
				"/root/.docker/contexts/meta/" + colima + "/meta.json":      `{"Endpoints":{"docker":{"Host":"tcp://10.0.0.2:2376"}}}`,
				"/root/.docker/contexts/tls/" + colima + "/docker/ca.pem":   "",
				"/root/.docker/contexts/tls/" + colima + "/docker/cert.pem": "",
				"/root/.docker/contexts/tls/" + colima + "/docker/key.pem":  "",
			},
			want: endpoint{Host: "tcp://10.0.0.2:2376", Source: `docker context "colima"`,
				CAFile:   "/root/.docker/contexts/tls/" + colima + "/docker/ca.pem",
				CertFile: "/root/.docker/contexts/tls/" + colima + "/docker/cert.pem",
				KeyFile:  "/root/.docker/contexts/tls/" + colima + "/docker/key.pem"},
		},
		{
			name: "the default context is the platform default", goos: "darwin", home: "/Users/u",
			files: map[string]string{"/Users/u/.docker/config.json": `{"currentContext":"default"}`, "/var/run/docker.sock": ""},
			want:  endpoint{Host: "unix:///var/run/docker.sock", Source: "default socket"},
		},
		{
			name: "macOS without the standard socket: Docker Desktop's", goos: "darwin", home: "/Users/u",
			files: map[string]string{"/Users/u/.docker/run/docker.sock": ""},
			want:  endpoint{Host: "unix:///Users/u/.docker/run/docker.sock", Source: "Docker Desktop's socket"},
		},
		{
			name: "macOS with nothing running yet waits for Docker Desktop", goos: "darwin", home: "/Users/u",
			want: endpoint{Host: "unix:///Users/u/.docker/run/docker.sock", Source: "Docker Desktop's socket"},
		},
		{
			name: "Windows: the named pipe", goos: "windows", home: `C:\Users\u`,
			want: endpoint{Host: "npipe:////./pipe/docker_engine", Source: "Docker Desktop's named pipe"},
		},
		{
			name: "Windows: a context under the user's profile", goos: "windows", home: `C:\Users\u`,
			files: map[string]string{
				`C:\Users\u\.docker\config.json`:                             `{"currentContext":"desktop-linux"}`,
				`C:\Users\u\.docker\contexts\meta\` + desktop + `\meta.json`: `{"Endpoints":{"docker":{"Host":"npipe:////./pipe/dockerDesktopLinuxEngine"}}}`,
			},
			want: endpoint{Host: "npipe:////./pipe/dockerDesktopLinuxEngine", Source: `docker context "desktop-linux"`},
		},
		{
			name: "a context that does not exist", goos: "linux", home: "/root",
			env:     map[string]string{"DOCKER_CONTEXT": "gone"},
			wantErr: `docker context "gone" (from DOCKER_CONTEXT)`,
		},
		{
			name: "a broken config.json", goos: "linux", home: "/root",
			files:   map[string]string{"/root/.docker/config.json": `{`},
			wantErr: "docker CLI config /root/.docker/config.json",
		},
		{
			name: "ssh endpoints are refused with the way around", goos: "linux", home: "/root",
			env:     map[string]string{"DOCKER_HOST": "ssh://me@box"},
			wantErr: "ssh -NL /tmp/docker.sock:/var/run/docker.sock",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := discoverEndpoint(tt.configured, fakeHost(tt.goos, tt.home, tt.env, tt.files))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
