package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/lifecycle"
)

// templateRoutes serves upstream's /templates API (fast-sandbox golden
// images on Kubernetes), which sandboxd does not have: like upstream's
// server without them, every route answers 501 FSB::API_NOT_SUPPORTED
// after authentication and the request's own validation.
func (s *Server) templateRoutes(r routeAdder) {
	r("/templates", s.handleCreateTemplate).Methods(http.MethodPost)
	r("/templates", s.handleListTemplates).Methods(http.MethodGet)
	r("/templates/{id}", s.templatesUnsupported).Methods(http.MethodGet, http.MethodDelete)
}

func (s *Server) handleCreateTemplate(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if !s.decodeJSON(w, r, &req, false) {
		return
	}
	if req == nil {
		unprocessable(w, "model_attributes_type", []string{"body"}, "Input should be a valid dictionary or object")
		return
	}
	s.templatesUnsupported(w, r)
}

func (s *Server) handleListTemplates(w http.ResponseWriter, r *http.Request) {
	if _, _, ok := pageParams(w, r.URL.Query()); !ok {
		return
	}
	s.templatesUnsupported(w, r)
}

func (s *Server) templatesUnsupported(w http.ResponseWriter, r *http.Request) {
	s.fail(w, r, lifecycle.TemplatesUnsupported(s.engine))
}
