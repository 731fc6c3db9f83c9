package lifecycle

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// TestDefaultNetwork: with network_mode unset, the first reconcile makes
// sandboxd's isolated network and sandboxes join it; an engine that cannot
// make it keeps sandboxd from serving; an explicit network_mode is used as
// is and no network is made.
func TestDefaultNetwork(t *testing.T) {
	e := newStartingEnv(t, nil)
	e.rt.Hook("EnsureIsolatedNetwork", func(context.Context, string) error { return runtime.ErrUnavailable })
	if err := e.m.Reconcile(context.Background()); !errors.Is(err, runtime.ErrUnavailable) {
		t.Fatalf("reconcile without the network: %v, want ErrUnavailable", err)
	}
	e.rt.Hook("EnsureIsolatedNetwork", nil)
	if err := e.m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l, ok := e.rt.Network(DefaultNetwork); !ok || l[LabelNetwork] == "" {
		t.Fatalf("network %s: exists %v, labels %v", DefaultNetwork, ok, l)
	}
	_, cid := e.create(t, validRequest())
	if got := e.rt.Spec(t, cid).Network; got != (runtime.Network{Mode: runtime.NetworkIsolated, Name: DefaultNetwork}) {
		t.Errorf("sandbox network %+v, want %q", got, DefaultNetwork)
	}

	b := newEnv(t, func(c *config.Config) { c.Docker.NetworkMode = "bridge" })
	if _, ok := b.rt.Network(DefaultNetwork); ok {
		t.Error("network made although network_mode is set")
	}
	_, cid = b.create(t, validRequest())
	if got := b.rt.Spec(t, cid).Network; got.Mode != runtime.NetworkDefault {
		t.Errorf("sandbox network %+v, want the engine's default", got)
	}
}
