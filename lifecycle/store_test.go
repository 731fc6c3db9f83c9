package lifecycle

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStoreSandboxes(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	exp := time.Date(2026, 6, 1, 12, 0, 0, 123456000, time.UTC)
	r := &Record{ID: "a", State: recordReady, ContainerID: "c1", ExpiresAt: &exp, Metadata: map[string]string{"k": "v"}}
	if err := s.PutSandbox(r); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(&Record{ID: "b", State: recordCreating}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Sandbox("a")
	if err != nil {
		t.Fatal(err)
	}
	if got.ContainerID != "c1" || !got.ExpiresAt.Equal(exp) || !maps.Equal(got.Metadata, r.Metadata) {
		t.Errorf("Sandbox(a) = %+v", got)
	}
	if _, err := s.Sandbox("missing"); !errors.Is(err, errNoRecord) {
		t.Errorf("Sandbox(missing) error = %v, want errNoRecord", err)
	}
	all, err := s.Sandboxes()
	if err != nil || len(all) != 2 {
		t.Fatalf("Sandboxes = %d records, %v", len(all), err)
	}

	upd, err := s.UpdateSandbox("a", func(r *Record) error { r.State = "x"; return nil })
	if err != nil || upd.State != "x" {
		t.Fatalf("UpdateSandbox = %+v, %v", upd, err)
	}
	if got, _ := s.Sandbox("a"); got.State != "x" {
		t.Errorf("update not stored: %+v", got)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateSandbox("a", func(r *Record) error { r.State = "y"; return boom }); !errors.Is(err, boom) {
		t.Errorf("UpdateSandbox error = %v, want boom", err)
	}
	if got, _ := s.Sandbox("a"); got.State != "x" {
		t.Errorf("failed update was stored: %+v", got)
	}
	if _, err := s.UpdateSandbox("missing", func(*Record) error { return nil }); !errors.Is(err, errNoRecord) {
		t.Errorf("UpdateSandbox(missing) error = %v", err)
	}

	if err := s.DeleteSandbox("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sandbox("a"); !errors.Is(err, errNoRecord) {
		t.Errorf("deleted record still readable: %v", err)
	}
	if err := s.DeleteSandbox("a"); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
}

func TestStoreSnapshots(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	if err := s.PutSnapshot(&SnapshotRecord{ID: "s1", State: snapshotCreating, Image: "img"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateSnapshot("s1", func(r *SnapshotRecord) error { r.State = snapshotReady; return nil }); err != nil {
		t.Fatal(err)
	}
	got, err := s.Snapshot("s1")
	if err != nil || got.State != snapshotReady || got.Image != "img" {
		t.Fatalf("Snapshot = %+v, %v", got, err)
	}
	if all, err := s.Snapshots(); err != nil || len(all) != 1 {
		t.Errorf("Snapshots = %v, %v", all, err)
	}
	if err := s.DeleteSnapshot("s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot("s1"); !errors.Is(err, errNoRecord) {
		t.Errorf("deleted snapshot readable: %v", err)
	}
}

func TestStoreReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	secret, err := s.Secret("token-key")
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) != 32 {
		t.Errorf("secret is %d bytes", len(secret))
	}
	other, _ := s.Secret("other")
	if bytes.Equal(secret, other) {
		t.Error("two secret names share a value")
	}
	if err := s.SetMetaString("instance-id", "abc"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(&Record{ID: "a", State: recordReady, Image: "busybox"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTestStore(t, dir)
	defer s.Close()
	again, err := s.Secret("token-key")
	if err != nil || !bytes.Equal(again, secret) {
		t.Errorf("secret changed across reopen (%v)", err)
	}
	if v, err := s.MetaString("instance-id"); err != nil || v != "abc" {
		t.Errorf("MetaString = %q, %v", v, err)
	}
	if v, err := s.MetaString("absent"); err != nil || v != "" {
		t.Errorf("MetaString(absent) = %q, %v", v, err)
	}
	if r, err := s.Sandbox("a"); err != nil || r.Image != "busybox" {
		t.Errorf("record lost across reopen: %+v, %v", r, err)
	}
}

func TestStoreExclusive(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	defer s.Close()
	second, err := openStore(dir, 50*time.Millisecond) // waits for the lock's timeout, then fails
	if err == nil {
		second.Close()
		t.Fatal("a second OpenStore on the same dir succeeded")
	}
	if !strings.Contains(err.Error(), "another sandboxd") || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not say the state dir is in use", err)
	}
}

func TestOpenStoreCreatesPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "state")
	s := openTestStore(t, dir)
	defer s.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "state.db"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&^want != 0 {
			t.Errorf("%s mode %o, want at most %o", path, fi.Mode().Perm(), want)
		}
	}
}
