//go:build embedagents

package main

import _ "embed"

// The Linux agents (cmd/sandboxd-agent), placed here by the release build
// (cmd/release) through an -overlay, so the source tree holds no binaries.
var (
	//go:embed agents/sandboxd-agent-linux-amd64
	agentAMD64 []byte
	//go:embed agents/sandboxd-agent-linux-arm64
	agentARM64 []byte
)

// embeddedAgents returns the agents this release binary carries.
func embeddedAgents() map[string][]byte {
	return map[string][]byte{"linux/amd64": agentAMD64, "linux/arm64": agentARM64}
}
