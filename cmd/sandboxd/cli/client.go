package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/config"
)

const (
	headerAPIKey = "OPEN-SANDBOX-API-KEY"
	execdPort    = 44772
)

// target is the server and key a command talks to.
type target struct {
	base *url.URL // scheme://host:port, no path
	key  string
}

// resolveTarget finds the server and key: the --domain flag, then the
// SDKs' environment variables, then the config file sandboxd serves from.
func resolveTarget(configPath, domain string, getenv func(string) string) (target, error) {
	if domain == "" {
		domain = getenv("OPEN_SANDBOX_DOMAIN")
	}
	key := getenv("OPEN_SANDBOX_API_KEY")
	if domain == "" || key == "" {
		cfg, err := loadConfig(configPath)
		if err != nil {
			return target{}, err
		}
		if domain == "" {
			host := cfg.Server.Host
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				host = "127.0.0.1" // a wildcard listener answers on loopback
			}
			domain = net.JoinHostPort(host, strconv.Itoa(cfg.Server.Port))
		}
		if key == "" {
			key = cfg.Server.APIKey
		}
	}
	if key == "" {
		return target{}, errors.New("no API key: set OPEN_SANDBOX_API_KEY or [server] api_key in the config file")
	}
	u, err := parseDomain(domain, getenv("OPEN_SANDBOX_PROTOCOL"))
	if err != nil {
		return target{}, err
	}
	return target{base: u, key: key}, nil
}

// Target returns the server's base URL and the key that the client
// commands use given the --config and --domain flags' values (empty when
// not given): the flags, then the environment, then the config file.
func Target(configPath, domain string) (*url.URL, string, error) {
	t, err := resolveTarget(configPath, domain, os.Getenv)
	return t.base, t.key, err
}

// loadConfig reads the server's config file; a missing default file
// means the defaults, as for the server.
func loadConfig(path string) (config.Config, error) {
	p, explicit := config.ResolvePath(path)
	cfg, err := config.Load(p)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return config.Load("")
	}
	return cfg, err
}

// parseDomain accepts host:port (with protocol, default http) or a URL.
func parseDomain(domain, protocol string) (*url.URL, error) {
	if !strings.Contains(domain, "://") {
		if protocol == "" {
			protocol = "http"
		}
		domain = protocol + "://" + domain
	}
	u, err := url.Parse(domain)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("server %q: want host:port or an http(s) URL", domain)
	}
	u.Path, u.RawQuery, u.Fragment = strings.TrimSuffix(u.Path, "/"), "", ""
	return u, nil
}

// client calls the API of one server.
type client struct {
	target
	http *http.Client
}

func newClient(t target) *client {
	return &client{target: t, http: &http.Client{}}
}

// url joins the base with path (already escaped) and query.
func (c *client) url(path string, q url.Values) string {
	u := *c.base
	u.RawPath = u.Path + path
	u.Path, _ = url.PathUnescape(u.RawPath)
	if q != nil {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// sandboxPath is a lifecycle route of one sandbox.
func sandboxPath(id, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + rest
}

// execdPath is a route of the sandbox's execd API, through the proxy.
func execdPath(id, rest string) string {
	return "/sandboxes/" + url.PathEscape(id) + "/proxy/" + strconv.Itoa(execdPort) + rest
}

// apiError is the API's error envelope.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	switch {
	case e.Code != "" && e.Message != "":
		return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
	case e.Message != "":
		return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
	}
	return fmt.Sprintf("HTTP %d", e.Status)
}

// do sends a request with the key; body is JSON unless it is an
// io.Reader (then ctype names it). A non-2xx answer is an *apiError.
func (c *client) do(ctx context.Context, method, path string, q url.Values, body any, ctype string) (*http.Response, error) {
	return c.send(ctx, method, path, q, body, ctype, nil)
}

// send is do with more request headers.
func (c *client) send(ctx context.Context, method, path string, q url.Values, body any, ctype string, hdr http.Header) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd, ctype = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set(headerAPIKey, c.key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if sized, ok := body.(interface{ Len() int64 }); ok {
		req.ContentLength = sized.Len()
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		e := &apiError{Status: res.StatusCode}
		data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		if json.Unmarshal(data, e) != nil || (e.Code == "" && e.Message == "") {
			e.Message = strings.TrimSpace(string(data))
		}
		return nil, e
	}
	return res, nil
}

// json sends a request and decodes a JSON answer into out (if not nil).
func (c *client) json(ctx context.Context, method, path string, q url.Values, body, out any) error {
	res, err := c.do(ctx, method, path, q, body, "")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}
