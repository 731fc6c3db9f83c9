package lifecycle

import (
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runtime"
)

// A sandbox may sleep instead of dying (docs/sleep.md): after a time
// without activity, or at its expiry, it is paused (frozen: no CPU,
// memory kept) or stopped (processes ended, memory released, files kept),
// and the next call that needs it wakes it first. The policy rides in the
// create request's extensions, so that every SDK can send it; the idle
// threshold is upstream's own key.

// Extension keys of the sleep policy.
const (
	ExtSleepAfterIdle = "access.pause.after.idle.seconds"
	ExtIdleAction     = "sandboxd.io/idle-action"
	ExtResumeOn       = "sandboxd.io/resume-on"
	ExtResumeWait     = "sandboxd.io/resume-wait-seconds"
	ExtExpireAction   = "sandboxd.io/expire-action"
)

// Sleep levels and what an idle sandbox or an expiry does.
const (
	actionDelete = "delete"
	actionPause  = "pause"
	actionStop   = "stop"
)

// What wakes a sleeping sandbox.
const (
	resumeOnAccess = "access" // any call that needs it: proxied requests, endpoints, renew, resume
	resumeOnAPI    = "api"    // lifecycle API calls only; proxied requests get 503 SANDBOX::PAUSED
	resumeOnOff    = "off"    // POST /resume only
)

// Bounds of the policy's numbers.
const (
	minSleepIdle      = 30
	maxSleepIdle      = 86400
	defaultResumeWait = 60
	maxResumeWait     = 300
)

// SleepPolicy is a sandbox's sleep policy, fixed at create.
type SleepPolicy struct {
	// IdleSeconds is the idle time after which IdleAction applies; 0: none.
	IdleSeconds int    `json:"idleSeconds,omitempty"`
	IdleAction  string `json:"idleAction,omitempty"`
	ResumeOn    string `json:"resumeOn,omitempty"`
	// ResumeWait (seconds) is how long a waking call is held before it
	// is answered 503 SANDBOX::RESUMING (the wake goes on).
	ResumeWait int `json:"resumeWait,omitempty"`
	// ExpireAction puts the sandbox to sleep at its expiry instead of
	// deleting it ("" or delete: deleted).
	ExpireAction string `json:"expireAction,omitempty"`
	// Timeout is the create's timeout (seconds, 0: none): a wake from an
	// expired sleep grants max(Timeout, 300 s) again.
	Timeout int `json:"timeout,omitempty"`
}

// sleepsOnIdle reports whether the policy puts the sandbox to sleep (not
// deletes it) when idle.
func (p *SleepPolicy) sleepsOnIdle() bool {
	return p != nil && p.IdleSeconds > 0 && p.IdleAction != actionDelete
}

// sleepsOnExpiry reports whether expiry puts the sandbox to sleep.
func (p *SleepPolicy) sleepsOnExpiry() bool {
	return p != nil && (p.ExpireAction == actionPause || p.ExpireAction == actionStop)
}

// resumeWait is how long a waking call waits for the wake.
func (p *SleepPolicy) resumeWait() time.Duration {
	if p == nil || p.ResumeWait == 0 {
		return defaultResumeWait * time.Second
	}
	return time.Duration(p.ResumeWait) * time.Second
}

// sleepLimits are the server's settings the policy is read against.
type sleepLimits struct {
	// minIdle is the lowest idle threshold accepted: the wire's 30 s,
	// lower only by the test-only [lifecycle] test_min_idle_seconds.
	minIdle int
	// defaultIdle and defaultAction apply to a sandbox that sets no idle
	// threshold ([lifecycle] sleep_after_idle, sleep_action).
	defaultIdle   int
	defaultAction string
}

// parseSleepPolicy reads the sleep policy from a create's extensions:
// nil if the sandbox has none. timeout is the create's timeout (nil:
// none). A bad value is a 400 naming its key.
func parseSleepPolicy(ext map[string]string, timeout *int, lim sleepLimits) (*SleepPolicy, error) {
	bad := func(key, want string) error {
		return errf(KindInvalid, CodeInvalidParameter, "extensions[%q] must be %s, got %q", key, want, ext[key])
	}
	oneOf := func(key string, values ...string) (string, error) {
		v, ok := ext[key]
		if !ok {
			return "", nil
		}
		v = strings.ToLower(strings.TrimSpace(v))
		for _, ok := range values {
			if v == ok {
				return v, nil
			}
		}
		return "", bad(key, "one of "+strings.Join(values, ", "))
	}
	number := func(key string, lo, hi int) (int, error) {
		v, ok := ext[key]
		if !ok {
			return 0, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo || n > hi {
			return 0, bad(key, "an integer number of seconds between "+strconv.Itoa(lo)+" and "+strconv.Itoa(hi))
		}
		return n, nil
	}
	p := &SleepPolicy{}
	var err error
	if p.IdleSeconds, err = number(ExtSleepAfterIdle, lim.minIdle, maxSleepIdle); err != nil {
		return nil, err
	}
	if p.IdleAction, err = oneOf(ExtIdleAction, actionPause, actionStop, actionDelete); err != nil {
		return nil, err
	}
	if p.ResumeOn, err = oneOf(ExtResumeOn, resumeOnAccess, resumeOnAPI, resumeOnOff); err != nil {
		return nil, err
	}
	if p.ResumeWait, err = number(ExtResumeWait, 1, maxResumeWait); err != nil {
		return nil, err
	}
	if p.ExpireAction, err = oneOf(ExtExpireAction, actionDelete, actionPause, actionStop); err != nil {
		return nil, err
	}
	if p.IdleAction == actionDelete && p.ResumeOn != "" && p.ResumeOn != resumeOnOff {
		return nil, errf(KindInvalid, CodeInvalidParameter, "extensions[%q] = %q wakes a sleeping sandbox, but extensions[%q] = %q deletes it instead of putting it to sleep", ExtResumeOn, p.ResumeOn, ExtIdleAction, actionDelete)
	}
	if p.IdleSeconds == 0 && lim.defaultIdle > 0 {
		p.IdleSeconds = lim.defaultIdle
		if p.IdleAction == "" {
			p.IdleAction = lim.defaultAction
		}
	}
	if p.IdleSeconds == 0 {
		// Without a threshold only the expire action takes effect.
		p.IdleAction = ""
	}
	if p.IdleSeconds == 0 && !p.sleepsOnExpiry() {
		return nil, nil
	}
	if p.IdleAction == "" && p.IdleSeconds > 0 {
		p.IdleAction = actionPause
	}
	if p.ResumeOn == "" {
		p.ResumeOn = resumeOnAccess
	}
	if timeout != nil {
		p.Timeout = *timeout
	}
	return p, nil
}

// levels are the sleeps (pause, stop) the policy may put the sandbox in.
func (p *SleepPolicy) levels() []string {
	var out []string
	if p.sleepsOnIdle() {
		out = append(out, p.IdleAction)
	}
	if p.sleepsOnExpiry() {
		out = append(out, p.ExpireAction)
	}
	return out
}

// checkSleepSupported refuses a policy whose sleep the runtime cannot
// give: pausing needs runtime.Pauser, stopping runtime.Stopper.
func checkSleepSupported(p *SleepPolicy, rt runtime.Runtime) error {
	if p == nil {
		return nil
	}
	for _, level := range p.levels() {
		switch level {
		case actionPause:
			if rt.Features().Pauser == nil {
				return errf(KindInvalid, CodeAPINotSupported, "sleep by pause (extensions %q or %q = pause) is not supported when runtime.type='%s'", ExtIdleAction, ExtExpireAction, rt.Name())
			}
		case actionStop:
			if rt.Features().Stopper == nil {
				return errf(KindInvalid, CodeAPINotSupported, "sleep by stop (extensions %q or %q = stop) is not supported when runtime.type='%s'", ExtIdleAction, ExtExpireAction, rt.Name())
			}
		}
	}
	return nil
}

// sleepPolicy is a create's sleep policy, read against the server's
// settings and checked against the runtime.
func sleepPolicy(req CreateRequest, lc config.Lifecycle, rt runtime.Runtime) (*SleepPolicy, error) {
	lim := sleepLimits{minIdle: minSleepIdle, defaultIdle: int(lc.SleepAfterIdle.Seconds()), defaultAction: lc.SleepAction}
	if lc.TestMinIdleSeconds > 0 {
		lim.minIdle = lc.TestMinIdleSeconds
	}
	p, err := parseSleepPolicy(req.Extensions, req.Timeout, lim)
	if err != nil {
		return nil, err
	}
	return p, checkSleepSupported(p, rt)
}

// idleTimeout is the idle timeout a sandbox gets given the server's: its
// own idle delete replaces it, and so does its sleep (a sleeping sandbox
// is idle by nature, and not to be deleted for it).
func (p *SleepPolicy) idleTimeout(server int) int {
	switch {
	case p == nil || p.IdleSeconds == 0:
		return server
	case p.IdleAction == actionDelete:
		return p.IdleSeconds
	}
	return 0
}

// checkPoliced refuses a sleep by stop for a sandbox under an egress
// policy: its firewall lives in the network namespace that the sandbox's
// container owns, which a stop tears down and a start makes anew without
// it. A pause keeps the namespace, and the firewall in it.
func (p *SleepPolicy) checkPoliced(policed bool) error {
	if !policed || p == nil {
		return nil
	}
	for _, level := range p.levels() {
		if level == actionStop {
			return errf(KindInvalid, CodeInvalidParameter, "sleep by stop (extensions %q or %q = stop) is not supported for a sandbox under a networkPolicy (or [egress] default_policy): its firewall would not survive the stop; use pause", ExtIdleAction, ExtExpireAction)
		}
	}
	return nil
}
