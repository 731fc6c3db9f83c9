package lifecycle

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// StoreFor is the Store of a Manager on rt: where the runtime can hold
// records on the sandboxes themselves (runtime.Records), sandbox records
// live there, shared by every replica on that engine; local keeps the rest
// (snapshots, pools defined through the API), which stay this replica's.
func StoreFor(rt runtime.Runtime, local *BoltStore) Store {
	recs := rt.Features().Records
	if recs == nil {
		return local
	}
	return &clusterStore{BoltStore: local, recs: recs, pending: map[string]*Record{}}
}

// recordTimeout bounds each call of the cluster store into the engine.
const recordTimeout = 30 * time.Second

// clusterStore keeps sandbox records on the sandboxes (runtime.Records),
// the secrets and the instance id in the cluster, and the rest in the
// embedded BoltStore.
type clusterStore struct {
	*BoltStore
	recs runtime.Records

	// A record is written before its sandbox exists (state creating);
	// until the sandbox has one, it is held here. A restart loses it,
	// which is what reconciling would do with a half-made sandbox anyway.
	mu       sync.Mutex
	pending  map[string]*Record // by sandbox id
	instance string             // once known
}

func bounded[T any](fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	return fn(ctx)
}

// noRecord maps the runtime's not-found onto the store's.
func noRecord(err error) error {
	if errors.Is(err, runtime.ErrNotFound) {
		return errNoRecord
	}
	return err
}

// InstanceID implements Store: unless pinned, every replica gets the same
// one, derived from a cluster secret, so they see each other's sandboxes.
func (s *clusterStore) InstanceID() (string, error) {
	s.mu.Lock()
	known := s.instance
	s.mu.Unlock()
	if known != "" {
		return known, nil
	}
	b, err := s.Secret("instance-id")
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instance = hex.EncodeToString(b[:4])
	return s.instance, nil
}

// pin makes id the instance the store lists sandboxes by: a configured
// [lifecycle] instance_id rather than the cluster's.
func (s *clusterStore) pin(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instance = id
}

// Secret implements Store with the cluster's secret: a token one replica
// issued opens its sandbox on every other.
func (s *clusterStore) Secret(name string) ([]byte, error) {
	return bounded(func(ctx context.Context) ([]byte, error) { return s.recs.Secret(ctx, name) })
}

func (s *clusterStore) PutSandbox(r *Record) error {
	buf, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = bounded(func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.recs.PutRecord(ctx, containerName(r.ID), buf)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case errors.Is(err, runtime.ErrNotFound) && r.State == recordCreating:
		c := *r
		s.pending[r.ID] = &c
		return nil
	case err == nil:
		delete(s.pending, r.ID)
	}
	return err
}

func (s *clusterStore) Sandbox(id string) (*Record, error) {
	if r := s.held(id); r != nil {
		return r, nil
	}
	buf, err := bounded(func(ctx context.Context) ([]byte, error) { return s.recs.Record(ctx, containerName(id)) })
	if err != nil {
		return nil, noRecord(err)
	}
	r := new(Record)
	return r, json.Unmarshal(buf, r)
}

// held returns a copy of a pending record, or nil.
func (s *clusterStore) held(id string) *Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.pending[id]; r != nil {
		c := *r
		return &c
	}
	return nil
}

func (s *clusterStore) Sandboxes() ([]*Record, error) {
	instance, err := s.InstanceID()
	if err != nil {
		return nil, err
	}
	all, err := bounded(func(ctx context.Context) (map[string][]byte, error) {
		return s.recs.Records(ctx, map[string]string{LabelInstance: instance})
	})
	if err != nil {
		return nil, err
	}
	var out []*Record
	seen := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		r := new(Record)
		if err := json.Unmarshal(all[name], r); err != nil {
			return nil, err
		}
		seen[r.ID] = true
		out = append(out, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.pending {
		if !seen[id] {
			c := *r
			out = append(out, &c)
		}
	}
	return out, nil
}

func (s *clusterStore) UpdateSandbox(id string, fn func(*Record) error) (*Record, error) {
	s.mu.Lock()
	if r := s.pending[id]; r != nil {
		defer s.mu.Unlock()
		c := *r
		if err := fn(&c); err != nil {
			return nil, err
		}
		s.pending[id] = &c
		out := c
		return &out, nil
	}
	s.mu.Unlock()
	var out *Record
	_, err := bounded(func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.recs.UpdateRecord(ctx, containerName(id), func(cur []byte) ([]byte, error) {
			r := new(Record)
			if err := json.Unmarshal(cur, r); err != nil {
				return nil, err
			}
			if err := fn(r); err != nil {
				return nil, err
			}
			out = r
			return json.Marshal(r)
		})
	})
	if err != nil {
		return nil, noRecord(err)
	}
	return out, nil
}

// DeleteSandbox forgets a pending record; a sandbox's own record goes with
// the sandbox, which the caller has removed.
func (s *clusterStore) DeleteSandbox(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, id)
	return nil
}
