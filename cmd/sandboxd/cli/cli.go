// Package cli is sandboxd's command-line client: ls, create, exec, shell,
// cp, logs, renew, pause, resume, kill and fork against a running sandboxd,
// through the same HTTP API the SDKs use.
//
// It finds the server and the key like the SDKs: OPEN_SANDBOX_DOMAIN and
// OPEN_SANDBOX_API_KEY, else the config file sandboxd itself reads
// (--config, $SANDBOX_CONFIG_PATH or ~/.sandbox.toml).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand: run returns the process's exit code.
type command struct {
	usage string
	help  string
	run   func(ctx context.Context, e *env, args []string) (int, error)
}

var commands = map[string]*command{
	"ls":     {"ls [--state S]... [--metadata k=v&...] [--json]", "list sandboxes", runLs},
	"create": {"create [--timeout 10m|0] [--env K=V]... [--metadata K=V]... [--ext K=V]... [--cpu N] [--memory SIZE] IMAGE [-- ENTRYPOINT...]", "create a sandbox and print its id", runCreate},
	"exec":   {"exec [--cwd DIR] ID -- CMD [ARG...]", "run a command, stream its output, exit with its code (one CMD argument is a shell command line)", runExec},
	"shell":  {"shell [--cwd DIR] ID", "interactive terminal in a sandbox", runShell},
	"cp":     {"cp ID:PATH LOCAL | cp LOCAL ID:PATH", "copy a file out of or into a sandbox (LOCAL \"-\" is stdout or stdin)", runCp},
	"logs":   {"logs [--tail N] [--since 10m] ID", "print the container's log", runLogs},
	"renew":  {"renew ID DURATION", "set the expiry to DURATION from now (e.g. 30m)", runRenew},
	"pause":  {"pause ID...", "pause sandboxes", runPause},
	"resume": {"resume ID...", "resume sandboxes", runResume},
	"kill":   {"kill ID...", "delete sandboxes", runKill},
	"fork":   {"fork [-n N] [--timeout 10m] [--key K] ID", "fork a running sandbox into N new ones (its files, not its processes) and print their ids", runFork},
}

// Names lists the client's subcommands, for the server's usage message.
func Names() []string {
	return []string{"ls", "create", "exec", "shell", "cp", "logs", "renew", "pause", "resume", "kill", "fork"}
}

// Run runs subcommand name if it is one of the client's, and reports
// whether it was. The exit code is the command's (exec, shell), else 0 on
// success, 1 on failure, 2 for a bad command line.
func Run(name string, args []string) (code int, ok bool) {
	cmd, ok := commands[name]
	if !ok {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	e := &env{name: name, cmd: cmd, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	return e.exit(cmd.run(ctx, e, args)), true
}

// env is what a command runs with.
type env struct {
	name   string
	cmd    *command
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

// errHelp ends a command that printed its help.
var errHelp = errors.New("help requested")

// flags returns a flag set with the flags every command has.
func (e *env) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxd "+e.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: sandboxd %s\n  %s\n", e.cmd.usage, e.cmd.help)
		fs.PrintDefaults()
	}
	fs.String("config", "", "config file to take the server and key from (default $SANDBOX_CONFIG_PATH or ~/.sandbox.toml)")
	fs.String("domain", "", "server as host:port or URL (default $OPEN_SANDBOX_DOMAIN, else the config file)")
	return fs
}

// connect parses args with fs and returns a client for the server they
// and the environment name, and the remaining arguments.
func (e *env) connect(fs *flag.FlagSet, args []string) (*client, []string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, errHelp
		}
		return nil, nil, usageError{err.Error()}
	}
	t, err := resolveTarget(fs.Lookup("config").Value.String(), fs.Lookup("domain").Value.String(), e.getenv)
	if err != nil {
		return nil, nil, err
	}
	return newClient(t), fs.Args(), nil
}

// exit prints err and turns the result into an exit code.
func (e *env) exit(code int, err error) int {
	var u usageError
	switch {
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &u):
		fmt.Fprintf(e.stderr, "sandboxd %s: %s\nusage: sandboxd %s\n", e.name, u.msg, e.cmd.usage)
		return 2
	case err != nil:
		fmt.Fprintf(e.stderr, "sandboxd %s: %v\n", e.name, err)
		return max(code, 1)
	}
	return code
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// keyValues parses K=V flags into a map.
func keyValues(what string, in []string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want KEY=VALUE", what, kv)
		}
		out[k] = v
	}
	return out, nil
}
