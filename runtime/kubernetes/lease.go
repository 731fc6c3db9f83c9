package kubernetes

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Timing is how a Lease is held: a leader that stops renewing it for
// LeaseDuration (killed, cut off) is replaced; it renews every RetryPeriod
// and gives up leading when a renewal has not worked for RenewDeadline.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultTiming is client-go's usual: a dead leader is replaced within 15 s.
var DefaultTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// Elector makes one sandboxd replica at a time the leader, through a
// coordination.k8s.io Lease: the leader reaps expired sandboxes and fills
// pools, the others only serve.
type Elector struct {
	le      *leaderelection.LeaderElector
	leading atomic.Bool
	log     *slog.Logger
}

// NewElector campaigns for Lease name in namespace as identity (unique per
// replica: the pod name, or host and pid).
func NewElector(cs kubernetes.Interface, namespace, name, identity string, t Timing, log *slog.Logger) (*Elector, error) {
	e := &Elector{log: log}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: namespace},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   t.LeaseDuration,
		RenewDeadline:   t.RenewDeadline,
		RetryPeriod:     t.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				e.leading.Store(true)
				log.Info("leading: this replica reaps and fills pools", "lease", name, "identity", identity)
			},
			OnStoppedLeading: func() {
				e.leading.Store(false)
				log.Info("no longer leading", "lease", name, "identity", identity)
			},
			OnNewLeader: func(leader string) {
				if leader != identity {
					log.Info("another replica leads", "lease", name, "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return nil, err
	}
	e.le = le
	return e, nil
}

// Run campaigns until ctx ends, again after each lost leadership, and
// releases the Lease on the way out so that a successor need not wait.
func (e *Elector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		e.le.Run(ctx)
	}
}

// Leading reports whether this replica holds the Lease now.
func (e *Elector) Leading() bool { return e.leading.Load() }
