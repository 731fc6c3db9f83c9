package lifecycle

import (
	"context"

	"github.com/sandboxd/sandboxd/runtime"
)

// egressUp reports whether sandbox id's egress daemon has a live session.
func (m *Manager) egressUp(id string) bool {
	m.egress.mu.Lock()
	link := m.egress.byID[id]
	m.egress.mu.Unlock()
	if link == nil {
		return false
	}
	link.mu.Lock()
	defer link.mu.Unlock()
	if link.sess == nil {
		return false
	}
	select {
	case <-link.sess.Done():
		return false
	default:
		return true
	}
}

// memberEgress makes sure a policed pool member (rec, made from spec) has
// its egress daemon and rec its upstreams. An idle member has no record
// for the daemon's watcher to restore it from: a member adopted after a
// restart of sandboxd, or whose daemon died, gets it here, with the policy
// it was made with. Its firewall held meanwhile.
func (m *Manager) memberEgress(ctx context.Context, rec *Record, spec runtime.Spec) error {
	if rec.NetworkPolicy == nil {
		return nil
	}
	if len(rec.EgressUpstreams) == 0 {
		ups, err := m.egressUpstreams(ctx, spec)
		if err != nil {
			return err
		}
		rec.EgressUpstreams = ups
	}
	link := m.egress.get(rec.ID)
	link.change.Lock() // a check and a claim may both find it down
	defer link.change.Unlock()
	if m.egressUp(rec.ID) {
		return nil
	}
	_, err := m.pushPolicy(ctx, rec, *rec.NetworkPolicy)
	return err
}
