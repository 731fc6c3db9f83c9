//go:build e2e

package e2e

import (
	"reflect"
	"testing"
)

// TestWithTOML checks how the harness merges a test's TOML into the
// configuration it generates.
func TestWithTOML(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"server":    map[string]any{"host": "127.0.0.1", "port": int64(8080)},
			"lifecycle": map[string]any{"reaper_interval": "1s"},
		}
	}
	tests := []struct {
		name    string
		snippet string
		want    map[string]any
		wantErr bool
	}{
		{
			name:    "new table",
			snippet: "[storage]\nallowed_host_paths = [\"/tmp/x\"]\n",
			want: map[string]any{
				"server":    map[string]any{"host": "127.0.0.1", "port": int64(8080)},
				"lifecycle": map[string]any{"reaper_interval": "1s"},
				"storage":   map[string]any{"allowed_host_paths": []any{"/tmp/x"}},
			},
		},
		{
			name:    "key added to and key replaced in existing tables",
			snippet: "[lifecycle]\nidle_timeout = \"5s\"\n[server]\nport = 9\n",
			want: map[string]any{
				"server":    map[string]any{"host": "127.0.0.1", "port": int64(9)},
				"lifecycle": map[string]any{"reaper_interval": "1s", "idle_timeout": "5s"},
			},
		},
		{
			name:    "table replaced by a value",
			snippet: "lifecycle = 3\n",
			want: map[string]any{
				"server":    map[string]any{"host": "127.0.0.1", "port": int64(8080)},
				"lifecycle": int64(3),
			},
		},
		{
			name:    "invalid TOML",
			snippet: "[lifecycle\n",
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base()
			err := withTOML(tt.snippet)(cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(cfg, tt.want) {
				t.Errorf("merged config\n got %#v\nwant %#v", cfg, tt.want)
			}
		})
	}
}
