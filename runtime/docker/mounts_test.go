package docker

import (
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

func TestWritableAbove(t *testing.T) {
	cs := []container.Summary{
		{Mounts: []container.MountPoint{
			{Type: mount.TypeBind, Source: "/srv/work", RW: true},
			{Type: mount.TypeBind, Source: "/srv/ro", RW: false},
			{Type: mount.TypeVolume, Source: "/var/lib/docker/volumes/v/_data", RW: true},
		}},
		{Mounts: []container.MountPoint{{Type: mount.TypeBind, Source: "/data/", RW: true}}},
	}
	tests := []struct{ path, want string }{
		{"/srv/work/sub", "/srv/work"},
		{"/srv/work/a/b", "/srv/work"},
		{"/srv/work", ""}, // the same directory cannot be renamed from inside
		{"/srv/workshop", ""},
		{"/srv/ro/sub", ""},
		{"/srv", ""},
		{"/var/lib/docker/volumes/v/_data/x", ""},
		{"/data/x", "/data"},
	}
	for _, tt := range tests {
		if got := writableAbove(tt.path, cs); got != tt.want {
			t.Errorf("writableAbove(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
	root := []container.Summary{{Mounts: []container.MountPoint{{Type: mount.TypeBind, Source: "/", RW: true}}}}
	if got := writableAbove("/anything", root); got != "/" {
		t.Errorf("below a read-write / : %q", got)
	}
}
