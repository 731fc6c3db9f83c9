package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/runtime/egress"
)

// egressStatsTimeout bounds one daemon's answer during a scrape.
const egressStatsTimeout = 2 * time.Second

// EgressStats asks every running egress daemon for its verdict counts, by
// sandbox id. It starts no daemon; one that does not answer is left out
// (its series pause; Prometheus handles the reset of a restarted one).
func (eg *Egress) EgressStats(ctx context.Context) map[string]egress.Stats {
	eg.links.mu.Lock()
	links := make(map[string]*egressLink, len(eg.links.byID))
	for id, l := range eg.links.byID {
		links[id] = l
	}
	eg.links.mu.Unlock()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]egress.Stats{}
	)
	for id, l := range links {
		l.mu.Lock()
		sess := l.sess
		l.mu.Unlock()
		if sess == nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, egressStatsTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://egress/stats", nil)
			resp, err := sess.Transport().RoundTrip(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var st egress.Stats
			if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&st) != nil {
				return
			}
			mu.Lock()
			out[id] = st
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// WriteEgressPrometheus writes the egress verdict counters of stats.
func WriteEgressPrometheus(w io.Writer, stats map[string]egress.Stats) {
	ids := make([]string, 0, len(stats))
	for id := range stats {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, c := range []struct {
		name, help      string
		allowed, denied func(egress.Stats) uint64
	}{
		{"sandboxd_egress_dns_total", "DNS lookups of policed sandboxes by verdict, since their egress daemon started.",
			func(s egress.Stats) uint64 { return s.DNSAllowed }, func(s egress.Stats) uint64 { return s.DNSDenied }},
		{"sandboxd_egress_connections_total", "Connections on ports 80/443 of policed sandboxes by verdict on their name, since their egress daemon started.",
			func(s egress.Stats) uint64 { return s.ConnAllowed }, func(s egress.Stats) uint64 { return s.ConnDenied }},
	} {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
		for _, id := range ids {
			fmt.Fprintf(w, "%s{sandbox_id=%q,verdict=\"allowed\"} %d\n", c.name, id, c.allowed(stats[id]))
			fmt.Fprintf(w, "%s{sandbox_id=%q,verdict=\"denied\"} %d\n", c.name, id, c.denied(stats[id]))
		}
	}
}
