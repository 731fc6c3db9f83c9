// Command sandboxd-agent is what runs inside sandboxes, and nothing else:
// it links neither the engines' clients nor the server, so that the binary
// every sandbox maps and every Kubernetes pod copies stays small
// (depaware.txt lists its packages; TestAgentSize bounds it). sandboxd
// places it in each sandbox's agent volume as /opt/sandboxd/sandboxd and
// runs it there:
//
//	sandboxd agent ...                 the in-sandbox agent (execd API)
//	sandboxd egress hold|guard|serve   the egress helper's daemon
//	sandboxd install-agent DIR         copy itself into DIR/sandboxd
//	sandboxd version                   which build it is
//
// sandboxd's own binary answers the same commands: it is the agent when no
// sandboxd-agent is found beside it (docs/platforms.md).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/sandboxd/sandboxd/cmd/internal/buildinfo"
	"github.com/sandboxd/sandboxd/runtime/agent"
	"github.com/sandboxd/sandboxd/runtime/egress/guard"
)

// version and commit are stamped by the release build, as sandboxd's are.
var (
	version = "dev"
	commit  = ""
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "sandboxd-agent runs inside sandboxes, started by sandboxd (commands: agent, egress, install-agent, version)")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	switch args[0] {
	case "agent":
		err = agent.Main(context.Background(), args[1:], log)
	case "egress":
		err = guard.Main(context.Background(), args[1:], log)
	case "install-agent":
		err = agent.Install(args[1:], agent.OpenSelf)
	case "version":
		fmt.Println(buildinfo.Line("sandboxd-agent", version, commit))
	default:
		err = fmt.Errorf("unknown command %q (commands: agent, egress, install-agent, version)", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		os.Exit(1)
	}
}
