//go:build linux

package agent

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// backend is a server inside the "sandbox", on 127.0.0.1.
func backend(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Port()
}

func TestProxy(t *testing.T) {
	a := newTestAgent(t)
	port := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s|%s|%s|%s|%s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, body, r.Header.Get("X-Forwarded-Proto"))
	}))
	tests := []struct {
		method, path, body, want string
	}{
		{"GET", "/proxy/" + port, "", "GET|/|||http"},
		{"GET", "/proxy/" + port + "/", "", "GET|/|||http"},
		{"GET", "/proxy/" + port + "/a/b?x=1&y=%20", "", "GET|/a/b|x=1&y=%20||http"},
		{"GET", "/proxy/" + port + "/enc%2Fslash", "", "GET|/enc%2Fslash|||http"},
		{"POST", "/proxy/" + port + "/post", "payload", "POST|/post||payload|http"},
		{"DELETE", "/proxy/" + port + "/x", "", "DELETE|/x|||http"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, a.url+tt.path, strings.NewReader(tt.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != tt.want {
			t.Errorf("%s %s: %s %q, want %q", tt.method, tt.path, resp.Status, b, tt.want)
		}
	}

	// A port nobody listens on gives 502.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	wantError(t, a.do(t, http.MethodGet, fmt.Sprintf("/proxy/%d/", closed), nil), http.StatusBadGateway, "BACKEND_CONNECTION_FAILED")
	// A server that hangs up before answering gives a broken response.
	hangup := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	}))
	wantError(t, a.do(t, http.MethodGet, "/proxy/"+hangup+"/", nil), http.StatusBadGateway, "BACKEND_RESPONSE_FAILED")
	wantError(t, a.do(t, http.MethodGet, "/proxy/99999/", nil), http.StatusBadRequest, codeInvalidRequest)
}

// Server-sent events pass through as they are written, not when the
// response ends.
func TestProxyStreams(t *testing.T) {
	a := newTestAgent(t)
	release := make(chan struct{})
	port := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release // the test reads the first event before letting the response end
		io.WriteString(w, "data: second\n\n")
	}))
	defer close(release)
	resp := a.do(t, http.MethodGet, "/proxy/"+port+"/events", nil)
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
}

func TestProxyWebSocket(t *testing.T) {
	a := newTestAgent(t)
	port := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			c.WriteMessage(typ, append([]byte("echo:"), msg...))
		}
	}))
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(a.url, "http")+"/proxy/"+port+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := conn.ReadMessage(); err != nil || string(msg) != "echo:hi" {
		t.Fatalf("got %q, %v", msg, err)
	}
}
