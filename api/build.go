package api

// Build identifies the running binary; /health reports it.
type Build struct {
	Version string
	Commit  string
}

// SetBuild makes /health report b.
func (s *Server) SetBuild(b Build) { s.build = b }

// add puts the build's non-empty fields into a /health answer.
func (b Build) add(m map[string]string) map[string]string {
	if b.Version != "" {
		m["version"] = b.Version
	}
	if b.Commit != "" {
		m["commit"] = b.Commit
	}
	return m
}
