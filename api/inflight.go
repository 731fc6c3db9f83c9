package api

import (
	"fmt"
	"net/http"
	"sync"
)

// inflight counts the proxied requests in flight per sandbox and per
// credential, so that neither a sandbox (answering slowly, or with large
// responses) nor one token holder can make sandboxd hold an unbounded
// number of them.
type inflight struct {
	perSandbox, perCred int

	mu sync.Mutex
	n  map[string]int // "sb:"+id and "cred:"+credential -> requests in flight
}

func newInflight(perSandbox, perCred int) *inflight {
	return &inflight{perSandbox: perSandbox, perCred: perCred, n: map[string]int{}}
}

// acquire takes a slot for sandbox id and credential cred; it returns the
// function that gives it back, or false when either is at its cap.
func (f *inflight) acquire(id, cred string) (release func(), ok bool) {
	sb, cr := "sb:"+id, "cred:"+cred
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[sb] >= f.perSandbox || f.n[cr] >= f.perCred {
		return nil, false
	}
	f.n[sb]++
	f.n[cr]++
	var once sync.Once
	return func() { once.Do(func() { f.done(sb, cr) }) }, true
}

func (f *inflight) done(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if f.n[k]--; f.n[k] <= 0 {
			delete(f.n, k) // the map holds only what is in flight
		}
	}
}

// admitProxied takes an in-flight slot for a request to sandbox id with
// credential cred, or answers 429 and returns false.
func (s *Server) admitProxied(w http.ResponseWriter, r *http.Request, id, cred string) (release func(), ok bool) {
	release, ok = s.inflight.acquire(id, cred)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, r, http.StatusTooManyRequests, codeTooManyRequests, fmt.Sprintf("too many requests in flight to sandbox %s or with this credential ([server] max_proxy_requests_per_sandbox, max_proxy_requests_per_token)", id))
	}
	return release, ok
}
