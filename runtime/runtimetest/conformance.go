package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// labelConformance marks the sandboxes Conformance makes, with a value of
// its run, so that List can be checked and nothing else is touched.
const labelConformance = "sandboxd-conformance"

// Conformance runs the contract of package runtime's core interface
// against rt, as containerd's snapshotter suite runs against every
// snapshotter: the fakes in unit tests, Docker and Kubernetes in e2e. spec
// is the template of the sandboxes it makes: an image the engine has and a
// command that keeps running; each gets a name and labels of its own, and
// is removed at the end.
func Conformance(t *testing.T, rt runtime.Runtime, spec runtime.Spec) {
	var b [6]byte
	rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	ctx := t.Context()
	newSpec := func(name string) runtime.Spec {
		s := spec
		s.Name = "conformance-" + run + "-" + name
		s.Labels = maps.Clone(spec.Labels)
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[labelConformance] = run
		return s
	}
	create := func(t *testing.T, s runtime.Spec) string {
		t.Helper()
		id, err := rt.Create(ctx, s)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		if id == "" {
			t.Fatal("Create returned no id")
		}
		t.Cleanup(func() { _ = rt.Remove(context.WithoutCancel(ctx), id) })
		return id
	}

	t.Run("Ping", func(t *testing.T) {
		if err := rt.Ping(ctx); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})

	t.Run("Features", func(t *testing.T) {
		if rt.Features() != rt.Features() {
			t.Error("Features changed between two calls; they are constant for the runtime's life")
		}
	})

	t.Run("Lifecycle", func(t *testing.T) {
		s := newSpec("life")
		id := create(t, s)
		c, err := rt.Inspect(ctx, id)
		if err != nil {
			t.Fatalf("Inspect after Create: %v", err)
		}
		if c.ID != id {
			t.Errorf("Inspect: ID %q, want %q", c.ID, id)
		}
		if c.Labels[labelConformance] != run {
			t.Errorf("Inspect: labels %v lack %s=%s", c.Labels, labelConformance, run)
		}
		if c.State != runtime.StateCreated && c.State != runtime.StateRunning {
			t.Errorf("state after Create: %s, want created (or running while it starts)", c.State)
		}
		if err := rt.Start(ctx, id); err != nil {
			t.Fatalf("Start: %v", err)
		}
		waitFor(t, "running", func() (bool, error) {
			c, err := rt.Inspect(ctx, id)
			return c.State == runtime.StateRunning, err
		})
		for _, labels := range []map[string]string{{labelConformance: run}, {labelConformance: ""}} {
			list, err := rt.List(ctx, labels)
			if err != nil {
				t.Fatalf("List(%v): %v", labels, err)
			}
			if !slices.ContainsFunc(list, func(c runtime.Container) bool { return c.ID == id }) {
				t.Errorf("List(%v) lacks %s", labels, id)
			}
		}
		if list, err := rt.List(ctx, map[string]string{labelConformance: "other-" + run}); err != nil || len(list) != 0 {
			t.Errorf("List with another label value = %d sandboxes, %v; want none", len(list), err)
		}
		if err := rt.Remove(ctx, id); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		waitFor(t, "gone", func() (bool, error) {
			_, err := rt.Inspect(ctx, id)
			if errors.Is(err, runtime.ErrNotFound) {
				return true, nil
			}
			return false, err
		})
		if err := rt.Remove(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Remove of a removed sandbox: %v, want ErrNotFound", err)
		}
	})

	t.Run("NameInUse", func(t *testing.T) {
		s := newSpec("twice")
		create(t, s)
		if id, err := rt.Create(ctx, s); !errors.Is(err, runtime.ErrConflict) {
			if err == nil {
				_ = rt.Remove(ctx, id)
			}
			t.Errorf("second Create of name %s: %v, want ErrConflict", s.Name, err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		missing := "conformance-" + run + "-missing"
		if _, err := rt.Inspect(ctx, missing); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Inspect: %v, want ErrNotFound", err)
		}
		if err := rt.Start(ctx, missing); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Start: %v, want ErrNotFound", err)
		}
		if err := rt.Remove(ctx, missing); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("Remove: %v, want ErrNotFound", err)
		}
	})
}

// waitFor polls cond until it holds, for at most a minute (engines settle
// asynchronously: a pod runs, a deleted pod goes, after the call returns).
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after a minute (last error: %v)", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
