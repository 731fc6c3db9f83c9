package docker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// agent_transport is checked at start, and "exec" never asks the engine
// whether the direct path is possible.
func TestAgentTransportOption(t *testing.T) {
	opts := Options{Host: "unix:///nonexistent/docker.sock", Logger: slog.New(slog.DiscardHandler)}
	opts.AgentTransport = "tcp"
	if _, err := New(context.Background(), opts); err == nil || !strings.Contains(err.Error(), `"tcp"`) {
		t.Errorf("New with agent transport tcp: %v, want a refusal naming it", err)
	}
	opts.AgentTransport = TransportExec
	d, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if why := d.directWhyNot(context.Background()); why == nil || !strings.Contains(why.Error(), "agent_transport is exec") {
		t.Errorf("forced exec: %v", why)
	}
	// Auto asks the engine, which is not there: an error, so exec.
	opts.AgentTransport = ""
	if d, err = New(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if why := d.directWhyNot(context.Background()); why == nil {
		t.Error("auto with no engine: the direct path would be tried")
	}
}
