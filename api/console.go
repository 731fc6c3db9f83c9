package api

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/sandboxd/sandboxd/api/console"
)

// consoleRoutes serves the web console: its static files (public, they
// hold no data; see authorize) and its one data route, behind the key.
func (s *Server) consoleRoutes(r *mux.Router) {
	r.Handle(console.ActivityPath, console.Activity(s.activity, writeError)).Methods(http.MethodGet)
	static := console.Static()
	r.Handle(console.Prefix, static).Methods(http.MethodGet, http.MethodHead)
	r.PathPrefix(console.Prefix+"/").Handler(static).Methods(http.MethodGet, http.MethodHead)
}
