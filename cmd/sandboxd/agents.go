//go:build !embedagents

package main

// embeddedAgents is nil in a plain build: the agent of this machine's own
// platform is found beside the binary (localAgent), and [runtime]
// agent_binaries names others. The release build (cmd/release) embeds both
// Linux agents instead.
func embeddedAgents() map[string][]byte { return nil }
