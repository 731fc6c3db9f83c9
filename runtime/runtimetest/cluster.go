package runtimetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// Cluster is a second runtime, shaped like a Kubernetes one rather than
// Docker: the core only (no archive copy, no pause, no images, volumes or
// host paths), records held on the sandboxes themselves (runtime.Records)
// and a lease (runtime.Leadership) the test grants and revokes. Its
// sandboxes are a Runtime's, which Fake returns for the test to drive.
type Cluster struct {
	f *Runtime

	mu      sync.Mutex
	secrets map[string][]byte
	granted chan struct{} // closed while the lease is held
	lost    chan struct{} // closed when the lease held is lost
}

var (
	_ runtime.Runtime    = (*Cluster)(nil)
	_ runtime.Records    = (*Cluster)(nil)
	_ runtime.Leadership = (*Cluster)(nil)
)

// NewCluster returns an empty cluster whose lease is held.
func NewCluster(now func() time.Time) *Cluster {
	c := &Cluster{f: New(now), secrets: map[string][]byte{}}
	c.granted, c.lost = make(chan struct{}), make(chan struct{})
	close(c.granted)
	return c
}

// Fake is the in-memory engine behind the cluster, for SetAgent, Set,
// Hook and the other test controls.
func (c *Cluster) Fake() *Runtime { return c.f }

// Name is "kubernetes": engine-scoped error codes read KUBERNETES::.
func (c *Cluster) Name() string { return "kubernetes" }

// Features implements runtime.Runtime: the core, records and a lease.
func (c *Cluster) Features() runtime.Features {
	return runtime.Features{Records: c, Leadership: c}
}

func (c *Cluster) Ping(ctx context.Context) error { return c.f.Ping(ctx) }
func (c *Cluster) Create(ctx context.Context, spec runtime.Spec) (string, error) {
	return c.f.Create(ctx, spec)
}
func (c *Cluster) Start(ctx context.Context, id string) error { return c.f.Start(ctx, id) }
func (c *Cluster) Inspect(ctx context.Context, id string) (runtime.Container, error) {
	return c.f.Inspect(ctx, id)
}
func (c *Cluster) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	return c.f.List(ctx, labels)
}
func (c *Cluster) Remove(ctx context.Context, id string) error { return c.f.Remove(ctx, id) }
func (c *Cluster) Logs(ctx context.Context, id string, tail int, since time.Time) (io.ReadCloser, error) {
	return c.f.Logs(ctx, id, tail, since)
}
func (c *Cluster) Agent(ctx context.Context, id string) (http.RoundTripper, error) {
	return c.f.Agent(ctx, id)
}
func (c *Cluster) Close() error { return c.f.Close() }

// PutRecord implements runtime.Records.
func (c *Cluster) PutRecord(ctx context.Context, name string, data []byte) error {
	if err := c.f.call(ctx, "PutRecord", name); err != nil {
		return err
	}
	return c.f.with(name, func(ct *container) error {
		ct.record = slices.Clone(data)
		return nil
	})
}

// Record implements runtime.Records.
func (c *Cluster) Record(ctx context.Context, name string) ([]byte, error) {
	if err := c.f.call(ctx, "Record", name); err != nil {
		return nil, err
	}
	var out []byte
	err := c.f.with(name, func(ct *container) error {
		if ct.record == nil {
			return fmt.Errorf("record of %s: %w", name, runtime.ErrNotFound)
		}
		out = slices.Clone(ct.record)
		return nil
	})
	return out, err
}

// Records implements runtime.Records.
func (c *Cluster) Records(ctx context.Context, labels map[string]string) (map[string][]byte, error) {
	list, err := c.f.List(ctx, labels)
	if err != nil {
		return nil, err
	}
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	out := map[string][]byte{}
	for _, s := range list {
		if ct := c.f.containers[s.ID]; ct != nil && ct.record != nil {
			out[s.Name] = slices.Clone(ct.record)
		}
	}
	return out, nil
}

// UpdateRecord implements runtime.Records; the fake's lock makes it atomic.
func (c *Cluster) UpdateRecord(ctx context.Context, name string, fn func([]byte) ([]byte, error)) error {
	if err := c.f.call(ctx, "UpdateRecord", name); err != nil {
		return err
	}
	return c.f.with(name, func(ct *container) error {
		if ct.record == nil {
			return fmt.Errorf("record of %s: %w", name, runtime.ErrNotFound)
		}
		next, err := fn(slices.Clone(ct.record))
		if err != nil {
			return err
		}
		ct.record = next
		return nil
	})
}

// Secret implements runtime.Records.
func (c *Cluster) Secret(_ context.Context, name string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.secrets[name]; ok {
		return slices.Clone(s), nil
	}
	s := make([]byte, 32)
	_, _ = rand.Read(s)
	c.secrets[name] = s
	return slices.Clone(s), nil
}

// Lead implements runtime.Leadership.
func (c *Cluster) Lead(ctx context.Context) (context.Context, error) {
	for {
		c.mu.Lock()
		granted, lost := c.granted, c.lost
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-granted:
		}
		select {
		case <-lost:
			continue // lost before it was taken up
		default:
		}
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
			case <-lctx.Done():
			}
			cancel()
		}()
		return lctx, nil
	}
}

// Revoke takes the lease away: the context Lead returned ends, and Lead
// blocks until Grant.
func (c *Cluster) Revoke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.granted:
		close(c.lost)
		c.granted = make(chan struct{})
	default:
	}
}

// Grant gives the lease back.
func (c *Cluster) Grant() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.granted:
	default:
		c.lost = make(chan struct{})
		close(c.granted)
	}
}
