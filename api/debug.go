package api

import (
	"net/http/pprof"
	"os"

	"github.com/gorilla/mux"
)

// envPprof opts in to the Go profiler at /debug/pprof/ (value "1"). It is
// off by default; when on, like every route but /health and the proxy, it
// requires the API key. The benchmark (e2e/bench -pprof) uses it.
const envPprof = "SANDBOXD_PPROF"

// debugRoutes registers the profiler when the operator opted in.
func (s *Server) debugRoutes(r *mux.Router) {
	if os.Getenv(envPprof) != "1" {
		return
	}
	r.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	r.HandleFunc("/debug/pprof/profile", pprof.Profile)
	r.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	r.HandleFunc("/debug/pprof/trace", pprof.Trace)
	r.PathPrefix("/debug/pprof/").HandlerFunc(pprof.Index)
	s.log.Warn("profiler enabled at /debug/pprof/ (" + envPprof + "=1)")
}
