//go:build e2e

package e2e

import "testing"

// TestLifecycleTypeScriptSDK runs the whole lifecycle through the official
// TypeScript SDK (e2e/ts/lifecycle_sdk.test.mjs), with useServerProxy off
// and on.
func TestLifecycleTypeScriptSDK(t *testing.T) {
	s := startServer(t)
	s.runNode(t, "lifecycle_sdk.test.mjs", nil)
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("the SDK's kill left %d container(s) behind", len(left))
	}
}
