// Package console serves sandboxd's web console: static HTML, CSS and
// JavaScript embedded in the binary. The files hold no data and need no key;
// everything the page shows comes from the authenticated API, called by the
// page with the key the user typed (kept in the tab's sessionStorage and
// sent as the API's header, never in a cookie or a URL).
package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// Prefix is where the console is served.
const Prefix = "/console"

// ActivityPath serves the last activity of sandboxes (idle time), which the
// lifecycle API does not report. It is behind the API key like the API.
const ActivityPath = Prefix + "/api/activity"

// maxActivityIDs bounds one activity request (a list page is at most 200).
const maxActivityIDs = 200

//go:embed static
var static embed.FS

// securityHeaders apply to every console response: scripts and styles only
// from the console's own files (no inline script, so an injected string
// cannot run), no framing, no referrer, no caching of stale pages.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; " +
		"img-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
		"form-action 'none'; frame-ancestors 'none'",
	"X-Frame-Options":              "DENY",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "no-referrer",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
	"Cache-Control":                "no-cache",
}

// Public reports whether u names one of the console's static files, which
// are served without the API key. Only clean paths qualify, decoded and as
// sent, so that no spelling of ActivityPath or of an API route escapes
// authentication.
func Public(u *url.URL) bool {
	return publicPath(u.Path) && publicPath(u.EscapedPath())
}

func publicPath(p string) bool {
	if p != Prefix && !strings.HasPrefix(p, Prefix+"/") {
		return false
	}
	if p != Prefix+"/" && path.Clean(p) != p {
		return false
	}
	return !strings.HasPrefix(p, Prefix+"/api/") && p != Prefix+"/api"
}

// Static serves the embedded files under Prefix; "/console" redirects to
// "/console/", which is index.html. Directories are never listed.
func Static() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		if r.URL.Path == Prefix {
			http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix+"/")
		if name == "" {
			name = "index.html"
		}
		b, err := fs.ReadFile(files, name)
		if err != nil || !Public(r.URL) {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ctype)
		if r.Method != http.MethodHead {
			_, _ = w.Write(b)
		}
	})
}

func setHeaders(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range securityHeaders {
		h.Set(k, v)
	}
}

// ActivitySource knows when a sandbox was last used.
type ActivitySource interface {
	LastActivity(id string) (time.Time, error)
}

// ErrorWriter writes an error in the API's envelope.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, status int, code, msg string)

// Activity serves GET ActivityPath?id=A&id=B with {"A": time, ...}; unknown
// ids are left out.
func Activity(src ActivitySource, fail ErrorWriter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		ids := r.URL.Query()["id"]
		if len(ids) > maxActivityIDs {
			fail(w, r, http.StatusBadRequest, "CONSOLE::TOO_MANY_IDS", "at most 200 id parameters")
			return
		}
		out := make(map[string]time.Time, len(ids))
		for _, id := range ids {
			if t, err := src.LastActivity(id); err == nil {
				out[id] = t.UTC()
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
}
