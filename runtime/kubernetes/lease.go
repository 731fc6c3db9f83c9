package kubernetes

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Timing is how the Lease is held: a leader that stops renewing it for
// LeaseDuration (killed, cut off) is replaced; it retries every
// RetryPeriod and gives up leading when renewing has failed for
// RenewDeadline.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultTiming is client-go's usual: a dead leader is replaced within 15 s.
var DefaultTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// Lead implements runtime.Leadership with a coordination.k8s.io Lease
// (Options.LeaseName) held as Options.Identity. The leader releases the
// Lease when ctx ends, so a successor need not wait for it to expire. It
// fails only with ctx's error.
func (k *Kubernetes) Lead(ctx context.Context) (context.Context, error) {
	t := k.opts.LeaseTiming
	if t == (Timing{}) {
		t = DefaultTiming
	}
	led := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: k.opts.LeaseName, Namespace: k.opts.Namespace},
			Client:     k.cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: k.opts.Identity},
		},
		LeaseDuration:   t.LeaseDuration,
		RenewDeadline:   t.RenewDeadline,
		RetryPeriod:     t.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            k.opts.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			// Its ctx ends when renewing fails or ctx ends.
			OnStartedLeading: func(lctx context.Context) { led <- lctx },
			OnStoppedLeading: func() { k.log.Info("no longer leading", "lease", k.opts.LeaseName, "identity", k.opts.Identity) },
			OnNewLeader: func(id string) {
				k.log.Info("leader", "lease", k.opts.LeaseName, "leader", id, "self", id == k.opts.Identity)
			},
		},
	})
	if err != nil {
		// Options New checked: a bug, not a state to wait out silently.
		panic("kubernetes: lease configuration: " + err.Error())
	}
	go le.Run(ctx)
	select {
	case lctx := <-led:
		return lctx, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
