package lifecycle

import (
	"context"

	"github.com/sandboxd/sandboxd/runtime"
)

// egressUp reports whether sandbox id's egress daemon has a live session.
func (eg *Egress) egressUp(id string) bool {
	eg.links.mu.Lock()
	link := eg.links.byID[id]
	eg.links.mu.Unlock()
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
func (eg *Egress) memberEgress(ctx context.Context, rec *Record, spec runtime.Spec) error {
	if rec.NetworkPolicy == nil {
		return nil
	}
	if len(rec.EgressUpstreams) == 0 {
		ups, err := eg.egressUpstreams(ctx, spec)
		if err != nil {
			return err
		}
		rec.EgressUpstreams = ups
	}
	link := eg.links.get(rec.ID)
	link.change.Lock() // a check and a claim may both find it down
	defer link.change.Unlock()
	if eg.egressUp(rec.ID) {
		return nil
	}
	_, err := eg.pushPolicy(ctx, rec, *rec.NetworkPolicy)
	return err
}
