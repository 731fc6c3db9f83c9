package api

import (
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// poolRoutes serves upstream's /pools API (which upstream offers only on
// Kubernetes) on sandboxd's warm pools. A pool's networkPolicy, beside
// capacitySpec in a create, an update and the answers, is sandboxd's.
func (s *Server) poolRoutes(r routeAdder) {
	r("/pools", s.handleCreatePool).Methods(http.MethodPost)
	r("/pools", s.handleListPools).Methods(http.MethodGet)
	r("/pools/{name}", s.handleGetPool).Methods(http.MethodGet)
	r("/pools/{name}", s.handleUpdatePool).Methods(http.MethodPut)
	r("/pools/{name}", s.handleDeletePool).Methods(http.MethodDelete)
}

// capacitySpec is upstream's PoolCapacitySpec: every field required.
type capacitySpec struct {
	BufferMax *int `json:"bufferMax"`
	BufferMin *int `json:"bufferMin"`
	PoolMax   *int `json:"poolMax"`
	PoolMin   *int `json:"poolMin"`
}

// capacity checks that every field is present and not negative (422, as
// upstream's schema) and returns the capacity.
func (c *capacitySpec) capacity(w http.ResponseWriter) (lifecycle.PoolCapacity, bool) {
	if c == nil {
		unprocessable(w, "missing", []string{"body", "capacitySpec"}, "Field required")
		return lifecycle.PoolCapacity{}, false
	}
	fields := []struct {
		name string
		v    *int
	}{{"bufferMax", c.BufferMax}, {"bufferMin", c.BufferMin}, {"poolMax", c.PoolMax}, {"poolMin", c.PoolMin}}
	for _, f := range fields {
		switch {
		case f.v == nil:
			unprocessable(w, "missing", []string{"body", "capacitySpec", f.name}, "Field required")
			return lifecycle.PoolCapacity{}, false
		case *f.v < 0:
			unprocessable(w, "greater_than_equal", []string{"body", "capacitySpec", f.name}, "Input should be greater than or equal to 0")
			return lifecycle.PoolCapacity{}, false
		}
	}
	return lifecycle.PoolCapacity{BufferMax: *c.BufferMax, BufferMin: *c.BufferMin, PoolMax: *c.PoolMax, PoolMin: *c.PoolMin}, true
}

// poolTemplate is what a pool's sandboxes are made from, in either of two
// forms: sandboxd's, the fields of a create request (image, entrypoint,
// resourceLimits, env); or upstream's, a Kubernetes PodTemplateSpec with one
// container (image, command + args, env, resources.limits).
type poolTemplate struct {
	Image          *lifecycle.ImageSpec `json:"image"`
	Entrypoint     []string             `json:"entrypoint"`
	ResourceLimits map[string]string    `json:"resourceLimits"`
	Env            map[string]string    `json:"env"`
	Spec           *struct {
		Containers []struct {
			Image   string   `json:"image"`
			Command []string `json:"command"`
			Args    []string `json:"args"`
			Env     []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"env"`
			Resources struct {
				Limits map[string]json.RawMessage `json:"limits"`
			} `json:"resources"`
		} `json:"containers"`
	} `json:"spec"`
}

// poolSpec converts a template; it writes a 400 and returns false when the
// template cannot describe a sandbox.
func (s *Server) poolSpec(w http.ResponseWriter, r *http.Request, t poolTemplate) (lifecycle.PoolSpec, bool) {
	invalid := func(msg string) (lifecycle.PoolSpec, bool) {
		writeError(w, r, http.StatusBadRequest, lifecycle.CodePoolInvalid, msg)
		return lifecycle.PoolSpec{}, false
	}
	if t.Spec == nil {
		if t.Image == nil {
			return invalid("template needs image.uri (sandboxd's form) or spec.containers (a Kubernetes pod template)")
		}
		return lifecycle.PoolSpec{Image: t.Image.URI, Entrypoint: t.Entrypoint, ResourceLimits: t.ResourceLimits, Env: t.Env}, true
	}
	if len(t.Spec.Containers) != 1 {
		return invalid("template.spec.containers must hold exactly one container: a sandbox is one container")
	}
	c := t.Spec.Containers[0]
	if len(c.Command) == 0 && len(c.Args) > 0 {
		return invalid("template.spec.containers[0]: args need a command (sandboxd does not read the image's entrypoint)")
	}
	spec := lifecycle.PoolSpec{Image: c.Image, Entrypoint: append(c.Command, c.Args...)}
	if len(c.Env) > 0 {
		spec.Env = map[string]string{}
		for _, e := range c.Env {
			spec.Env[e.Name] = e.Value
		}
	}
	if len(c.Resources.Limits) > 0 {
		spec.ResourceLimits = map[string]string{}
		for k, raw := range c.Resources.Limits {
			// Kubernetes quantities are strings, or bare numbers.
			var v string
			if json.Unmarshal(raw, &v) != nil {
				var n json.Number
				if json.Unmarshal(raw, &n) != nil {
					return invalid("template.spec.containers[0].resources.limits." + k + " must be a quantity")
				}
				v = n.String()
			}
			spec.ResourceLimits[k] = v
		}
	}
	return spec, true
}

func (s *Server) handleCreatePool(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name          *string                  `json:"name"`
		Template      *poolTemplate            `json:"template"`
		CapacitySpec  *capacitySpec            `json:"capacitySpec"`
		NetworkPolicy *lifecycle.NetworkPolicy `json:"networkPolicy"`
	}
	if !s.decodeJSON(w, r, &req, false) {
		return
	}
	if req.Name == nil {
		unprocessable(w, "missing", []string{"body", "name"}, "Field required")
		return
	}
	if req.Template == nil {
		unprocessable(w, "missing", []string{"body", "template"}, "Field required")
		return
	}
	capacity, ok := req.CapacitySpec.capacity(w)
	if !ok {
		return
	}
	spec, ok := s.poolSpec(w, r, *req.Template)
	if !ok {
		return
	}
	spec.NetworkPolicy = req.NetworkPolicy
	p, err := s.pools.CreatePool(r.Context(), *req.Name, spec, capacity)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) handleListPools(w http.ResponseWriter, r *http.Request) {
	items, err := s.pools.ListPools(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (s *Server) handleGetPool(w http.ResponseWriter, r *http.Request) {
	p, err := s.pools.GetPool(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// optionalPolicy is an update's networkPolicy: absent keeps the pool's,
// null removes it.
type optionalPolicy struct {
	set    bool
	policy *lifecycle.NetworkPolicy
}

func (o *optionalPolicy) UnmarshalJSON(b []byte) error {
	o.set = true
	return json.Unmarshal(b, &o.policy) // type errors are located by the caller's decoder
}

func (s *Server) handleUpdatePool(w http.ResponseWriter, r *http.Request) {
	var req struct {
		CapacitySpec  *capacitySpec  `json:"capacitySpec"`
		NetworkPolicy optionalPolicy `json:"networkPolicy"`
	}
	if !s.decodeJSON(w, r, &req, false) {
		return
	}
	capacity, ok := req.CapacitySpec.capacity(w)
	if !ok {
		return
	}
	u := lifecycle.PoolUpdate{Capacity: capacity, SetPolicy: req.NetworkPolicy.set, NetworkPolicy: req.NetworkPolicy.policy}
	p, err := s.pools.UpdatePool(r.Context(), mux.Vars(r)["name"], u)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handleDeletePool(w http.ResponseWriter, r *http.Request) {
	if err := s.pools.DeletePool(r.Context(), mux.Vars(r)["name"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
