package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// sandbox is the part of the API's sandbox the client shows.
type sandbox struct {
	ID    string `json:"id"`
	Image *struct {
		URI string `json:"uri"`
	} `json:"image"`
	SnapshotID string `json:"snapshotId"`
	Status     struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	} `json:"status"`
	Metadata  map[string]string `json:"metadata"`
	ExpiresAt *time.Time        `json:"expiresAt"`
	CreatedAt time.Time         `json:"createdAt"`
}

// state is the sandbox's state, with the reason of a sleep (docs/sleep.md):
// "Paused (IDLE_STOPPED)" says what waking it costs.
func (s sandbox) state() string {
	if r := s.Status.Reason; strings.HasPrefix(r, "IDLE_") || strings.HasPrefix(r, "EXPIRED_") {
		return s.Status.State + " (" + r + ")"
	}
	return s.Status.State
}

func (s sandbox) image() string {
	switch {
	case s.Image != nil:
		return s.Image.URI
	case s.SnapshotID != "":
		return "snapshot " + s.SnapshotID
	}
	return "-"
}

func runLs(ctx context.Context, e *env, args []string) (int, error) {
	fs := e.flags()
	var states multiFlag
	fs.Var(&states, "state", "only sandboxes in this state (repeatable, or comma-separated)")
	metadata := fs.String("metadata", "", "only sandboxes with this metadata, as k=v&k2=v2")
	asJSON := fs.Bool("json", false, "print the API's JSON items")
	c, rest, err := e.connect(fs, args)
	if err != nil {
		return 0, err
	}
	if len(rest) > 0 {
		return 0, usagef("ls takes no arguments")
	}
	q := url.Values{"pageSize": {"200"}}
	for _, s := range states {
		for _, one := range strings.Split(s, ",") {
			q.Add("state", strings.TrimSpace(one))
		}
	}
	if *metadata != "" {
		q.Set("metadata", *metadata)
	}
	var all []json.RawMessage
	for page := 1; ; page++ {
		q.Set("page", strconv.Itoa(page))
		var list struct {
			Items      []json.RawMessage `json:"items"`
			Pagination struct {
				HasNextPage bool `json:"hasNextPage"`
			} `json:"pagination"`
		}
		if err := c.json(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &list); err != nil {
			return 1, err
		}
		all = append(all, list.Items...)
		if !list.Pagination.HasNextPage || len(list.Items) == 0 {
			break
		}
	}
	if *asJSON {
		out := json.NewEncoder(e.stdout)
		out.SetIndent("", "  ")
		return 0, out.Encode(all)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tIMAGE\tEXPIRES\tCREATED\tMETADATA")
	for _, raw := range all {
		var s sandbox
		if err := json.Unmarshal(raw, &s); err != nil {
			return 1, err
		}
		expires := "never"
		if s.ExpiresAt != nil {
			expires = "in " + roundDuration(s.ExpiresAt.Sub(now))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\t%s\n", s.ID, s.state(), s.image(), expires,
			roundDuration(now.Sub(s.CreatedAt)), formatMetadata(s.Metadata))
	}
	return 0, tw.Flush()
}

// roundDuration prints d to the second, or "0s" when past.
func roundDuration(d time.Duration) string {
	if d < 0 {
		return "0s"
	}
	return d.Round(time.Second).String()
}

func formatMetadata(md map[string]string) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + md[k]
	}
	return strings.Join(parts, ",")
}

func runCreate(ctx context.Context, e *env, args []string) (int, error) {
	fs := e.flags()
	timeout := fs.Duration("timeout", 10*time.Minute, "expire after this long; 0 for manual clean-up")
	var envs, metadata multiFlag
	fs.Var(&envs, "env", "environment variable K=V (repeatable)")
	fs.Var(&metadata, "metadata", "metadata label K=V (repeatable)")
	var exts multiFlag
	fs.Var(&exts, "ext", "create extension K=V (repeatable), e.g. access.pause.after.idle.seconds=600 and sandboxd.io/idle-action=stop to sleep when idle")
	cpu := fs.String("cpu", "", "CPU limit, e.g. 1 or 500m (default: the server's)")
	memory := fs.String("memory", "", "memory limit, e.g. 2Gi (default: the server's)")
	asJSON := fs.Bool("json", false, "print the API's answer")
	c, rest, err := e.connect(fs, args)
	if err != nil {
		return 0, err
	}
	if len(rest) == 0 {
		return 0, usagef("create needs an IMAGE")
	}
	image, entrypoint := rest[0], rest[1:]
	if len(entrypoint) > 0 && entrypoint[0] == "--" {
		entrypoint = entrypoint[1:]
	}
	if len(entrypoint) == 0 {
		entrypoint = []string{"tail", "-f", "/dev/null"} // keeps the sandbox up for exec and shell
	}
	req := map[string]any{"image": map[string]string{"uri": image}, "entrypoint": entrypoint}
	if *timeout > 0 {
		req["timeout"] = int(timeout.Seconds())
	} else {
		req["timeout"] = nil
	}
	for _, f := range []struct {
		flag, field string
		kv          multiFlag
	}{{"env", "env", envs}, {"metadata", "metadata", metadata}, {"ext", "extensions", exts}} {
		m, err := keyValues("--"+f.flag, f.kv)
		if err != nil {
			return 0, err
		}
		if m != nil {
			req[f.field] = m
		}
	}
	limits := map[string]string{}
	if *cpu != "" {
		limits["cpu"] = *cpu
	}
	if *memory != "" {
		limits["memory"] = *memory
	}
	if len(limits) > 0 {
		req["resourceLimits"] = limits
	}
	var raw json.RawMessage
	if err := c.json(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &raw); err != nil {
		return 1, err
	}
	if *asJSON {
		_, err := fmt.Fprintf(e.stdout, "%s\n", raw)
		return 0, err
	}
	var sb sandbox
	if err := json.Unmarshal(raw, &sb); err != nil {
		return 1, err
	}
	_, err = fmt.Fprintln(e.stdout, sb.ID)
	return 0, err
}

func runLogs(ctx context.Context, e *env, args []string) (int, error) {
	fs := e.flags()
	tail := fs.Int("tail", 100, "last N lines (1-10000)")
	since := fs.String("since", "", "only lines newer than this: 10m, 1h or an RFC 3339 time")
	c, rest, err := e.connect(fs, args)
	if err != nil {
		return 0, err
	}
	if len(rest) != 1 {
		return 0, usagef("logs needs one ID")
	}
	q := url.Values{"tail": {strconv.Itoa(*tail)}}
	if *since != "" {
		q.Set("since", *since)
	}
	res, err := c.do(ctx, http.MethodGet, sandboxPath(rest[0], "/diagnostics/logs"), q, nil, "")
	if err != nil {
		return 1, err
	}
	defer res.Body.Close()
	_, err = io.Copy(e.stdout, res.Body)
	return 0, err
}

func runRenew(ctx context.Context, e *env, args []string) (int, error) {
	c, rest, err := e.connect(e.flags(), args)
	if err != nil {
		return 0, err
	}
	if len(rest) != 2 {
		return 0, usagef("renew needs an ID and a DURATION")
	}
	d, err := time.ParseDuration(rest[1])
	if err != nil || d <= 0 {
		return 0, usagef("DURATION %q: want a positive duration such as 30m or 2h", rest[1])
	}
	var out struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	body := map[string]string{"expiresAt": time.Now().Add(d).UTC().Format(time.RFC3339)}
	if err := c.json(ctx, http.MethodPost, sandboxPath(rest[0], "/renew-expiration"), nil, body, &out); err != nil {
		return 1, err
	}
	_, err = fmt.Fprintf(e.stdout, "%s expires at %s\n", rest[0], out.ExpiresAt.Local().Format(time.RFC3339))
	return 0, err
}

func runPause(ctx context.Context, e *env, args []string) (int, error) {
	return eachID(ctx, e, args, http.MethodPost, "/pause")
}

func runResume(ctx context.Context, e *env, args []string) (int, error) {
	return eachID(ctx, e, args, http.MethodPost, "/resume")
}

func runKill(ctx context.Context, e *env, args []string) (int, error) {
	return eachID(ctx, e, args, http.MethodDelete, "")
}

// eachID sends one request per sandbox and prints the ids that worked;
// it goes on after a failure and then exits 1.
func eachID(ctx context.Context, e *env, args []string, method, rest string) (int, error) {
	c, ids, err := e.connect(e.flags(), args)
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, usagef("%s needs at least one ID", e.name)
	}
	code := 0
	for _, id := range ids {
		var body any
		if method == http.MethodPost {
			body = struct{}{}
		}
		if err := c.json(ctx, method, sandboxPath(id, rest), nil, body, nil); err != nil {
			fmt.Fprintf(e.stderr, "sandboxd %s %s: %v\n", e.name, id, err)
			code = 1
			continue
		}
		fmt.Fprintln(e.stdout, id)
	}
	return code, nil
}
