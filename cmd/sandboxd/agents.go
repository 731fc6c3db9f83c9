//go:build !embedagents

package main

// embeddedAgents is nil in a plain build: on Linux sandboxd's own binary is
// the agent of its own platform, and [runtime] agent_binaries names others.
// The release build (cmd/release) embeds both Linux agents instead.
func embeddedAgents() map[string][]byte { return nil }
