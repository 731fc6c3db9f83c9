//go:build linux

package agent

import "net/http"

// sandboxd's agent has no isolator (upstream's bubblewrap sessions,
// /v1/isolated/*). The capabilities route says so, as upstream's execd does
// on a host without bwrap, and every other isolated route answers 503: a
// client never gets a session that is not isolated.

// isolatedCapabilities serves GET /v1/isolated/capabilities.
func (s *server) isolatedCapabilities(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"available":         false,
		"message":           isolationUnavailable,
		"commit_supported":  false,
		"diff_supported":    false,
		"setpriv_available": false,
		"userns_available":  false,
	})
}

const isolationUnavailable = "isolated sessions are not available: sandboxd's agent has no isolator (bubblewrap); run the code in the sandbox itself, which is already isolated from the host"

// isolatedUnavailable serves every other /v1/isolated route.
func (s *server) isolatedUnavailable(w http.ResponseWriter, _ *http.Request) {
	writeError(w, http.StatusServiceUnavailable, codeNotSupported, isolationUnavailable)
}
