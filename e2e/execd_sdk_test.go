//go:build e2e

package e2e

import "testing"

// The execd API through the official TypeScript SDK: each test runs one
// e2e/ts/execd_*.test.mjs file against its own server and checks that the
// file deleted every sandbox it created.
func TestExecdCommandsSDK(t *testing.T)     { runExecdNode(t, "execd_commands.test.mjs") }
func TestExecdFilesSDK(t *testing.T)        { runExecdNode(t, "execd_files.test.mjs") }
func TestExecdBackgroundSDK(t *testing.T)   { runExecdNode(t, "execd_background.test.mjs") }
func TestExecdPortProxySDK(t *testing.T)    { runExecdNode(t, "execd_proxy.test.mjs") }
func TestExecdNoShellSDK(t *testing.T)      { runExecdNode(t, "execd_noshell.test.mjs") }
func TestExecdDeepAgentsSDK(t *testing.T)   { runExecdNode(t, "execd_deepagents.test.mjs") }
func TestExecdDataAnalysisSDK(t *testing.T) { runExecdNode(t, "execd_analysis.test.mjs") }

func runExecdNode(t *testing.T, script string) {
	s := startServer(t)
	s.runNode(t, script, nil)
	if left := containersByLabel(t, labelInstance, s.InstanceID); len(left) != 0 {
		t.Errorf("%s left %d container(s) behind", script, len(left))
	}
}
