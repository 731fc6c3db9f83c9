// Command sandboxd is a self-hosted sandbox runtime for AI agents that
// serves the OpenSandbox API on the Docker Engine.
//
//	sandboxd [--config PATH] [--insecure]    serve (default)
//	sandboxd init-config [PATH] [--example docker] [--force]
//	sandboxd version
//	sandboxd agent                            (runs inside sandboxes)
//	sandboxd install-agent DIR                (init container of Kubernetes sandbox pods)
//	sandboxd egress hold|guard|serve          (runs in egress helpers)
//	sandboxd mcp [--domain D] [--no-create]   MCP tools over stdio, against a running server
//	sandboxd ls|create|exec|shell|cp|logs|renew|pause|resume|kill ...   (client; see package cli)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/cmd/sandboxd/cli"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
	"github.com/sandboxd/sandboxd/runtime"
	"github.com/sandboxd/sandboxd/runtime/agent"
	"github.com/sandboxd/sandboxd/runtime/docker"
	"github.com/sandboxd/sandboxd/runtime/egress/guard"
)

func main() {
	args := os.Args[1:]
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "", "serve":
		err = serve(args)
	case "init-config":
		err = initConfig(args)
	case "version":
		fmt.Println(versionLine())
	case "agent":
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		err = agent.Main(context.Background(), args, log)
	case "install-agent":
		err = installAgent(args)
	case "mcp":
		err = runMCP(args)
	case "egress":
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		err = guard.Main(context.Background(), args, log)
	default:
		if code, ok := cli.Run(cmd, args); ok {
			os.Exit(code)
		}
		err = fmt.Errorf("unknown command %q (commands: serve, init-config, version, agent, mcp, %s)", cmd, strings.Join(cli.Names(), ", "))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxd:", err)
		os.Exit(1)
	}
}

// initConfig writes a working, secure config file.
func initConfig(args []string) error {
	flags := flag.NewFlagSet("init-config", flag.ContinueOnError)
	example := flags.String("example", "docker", "example to write (docker)")
	force := flags.Bool("force", false, "overwrite an existing file")
	var positional []string
	for len(args) > 0 {
		if err := flags.Parse(args); err != nil {
			return err
		}
		args = flags.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	if len(positional) > 1 {
		return errors.New("init-config takes at most one PATH")
	}
	path := config.DefaultPath
	if len(positional) == 1 {
		path = positional[0]
	}
	path, _ = config.ResolvePath(path)
	if _, err := config.WriteExample(path, *example, *force); err != nil {
		return err
	}
	fmt.Printf("Wrote example config (%s) to %s with a new API key (mode 0600).\n", *example, path)
	fmt.Printf("Start the server with: sandboxd --config %s\n", path)
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serve(args []string) error {
	flags := flag.NewFlagSet("sandboxd", flag.ContinueOnError)
	configPath := flags.String("config", "", "config file (default $SANDBOX_CONFIG_PATH or ~/.sandbox.toml)")
	insecure := flags.Bool("insecure", false, "allow running without an API key (loopback only)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	path, explicit := config.ResolvePath(*configPath)
	cfg, err := config.Load(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		cfg, err = config.Load("")
	}
	if err != nil {
		return err
	}
	if *insecure {
		cfg.Server.Insecure = true
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.Log.SlogLevel()}))
	for _, k := range cfg.Ignored {
		log.Info("ignored config key (not used by sandboxd)", "key", k)
	}
	if len(cfg.APIKeysAll()) == 0 {
		if !cfg.Server.Insecure {
			return fmt.Errorf("no API key configured; refusing to start an open server.\n" +
				"  Create a config with a fresh key:   sandboxd init-config\n" +
				"  or set [server] api_key, or env OPENSANDBOX_SERVER_API_KEY.\n" +
				"  To run without a key on loopback only: --insecure (or OPENSANDBOX_INSECURE_SERVER=YES)")
		}
		if !isLoopback(cfg.Server.Host) {
			return fmt.Errorf("insecure mode (no API key) only binds loopback, but [server] host is %q; use 127.0.0.1 or configure an API key", cfg.Server.Host)
		}
		log.Warn("SECURITY WARNING: running without an API key (insecure mode, loopback only)")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// The store and the engine client belong to the Manager once it
	// exists: its Shutdown closes them after the work in flight.
	store, err := lifecycle.OpenStore(cfg.Store.Dir)
	if err != nil {
		return err
	}
	rt, err := newRuntime(ctx, cfg, log)
	if err != nil {
		store.Close()
		return err
	}
	mgr, err := newManager(ctx, cfg, rt, lifecycle.StoreFor(rt, store), log)
	if err != nil {
		rt.Close()
		store.Close()
		return err
	}
	// Until the first reconcile has finished, the API answers 503.
	mgr.Start()
	err = listenAndServe(ctx, cfg, mgr, rt, log)
	// The requests in flight have finished (or were cut at their
	// deadline); now the lifecycle's own work, then the store and client.
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if serr := mgr.Shutdown(sctx); serr != nil {
		log.Warn("lifecycle shutdown", "err", serr)
	}
	return err
}

// listenAndServe serves the API until ctx ends, then stops intake and
// waits for the requests in flight.
func listenAndServe(ctx context.Context, cfg config.Config, mgr *lifecycle.Manager, rt runtime.Runtime, log *slog.Logger) error {
	tcp, err := net.Listen("tcp", cfg.Addr())
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr(), err)
	}
	ver, commit := build()
	handler := api.New(cfg, api.Backends{
		Engine: mgr.Engine(), Life: mgr, Metrics: mgr.Metrics(),
		Sandboxes: mgr.Sandboxes, Diagnostics: mgr.Sandboxes, Proxy: mgr.Sandboxes,
		Snapshots: mgr.Snapshots, Forks: mgr.Forks, Pools: mgr.Pools, Files: mgr.Files, Egress: mgr.Egress, Activity: mgr.Expiry,
	}, rt, log)
	handler.SetBuild(api.Build{Version: ver, Commit: commit})
	ln := api.NewConnLimiter(tcp, func() int { return maxConnections(cfg.Server.MaxConnections, fileLimit()) }, log)
	srv := &http.Server{
		Handler:           handler,
		ConnState:         ln.ConnState,
		ReadHeaderTimeout: 30 * time.Second,
		MaxHeaderBytes:    api.MaxHeaderBytes,
		IdleTimeout:       cfg.Server.IdleTimeout.Duration,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	log.Info("sandboxd listening", "addr", ln.Addr().String(), "version", ver, "commit", commit, "instance", mgr.Instance(), "config", cfg.Path, "state_dir", cfg.Store.Dir, "file_limit", fileLimit())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests; sandboxes keep running")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown deadline passed; closing remaining connections", "err", err)
		srv.Close()
	}
	return nil
}

// newManager checks the engine's storage driver and builds the Manager.
func newManager(ctx context.Context, cfg config.Config, rt runtime.Runtime, store lifecycle.Store, log *slog.Logger) (*lifecycle.Manager, error) {
	d, ok := rt.(*docker.Docker)
	if !ok {
		return lifecycle.New(cfg, rt, store, log)
	}
	if err := d.CheckDiskLimit(ctx); err != nil {
		if !errors.Is(err, runtime.ErrUnavailable) {
			return nil, err
		}
		log.Warn("cannot check that the storage driver supports [docker] disk_limit; creates fail if it does not", "err", err)
	}
	return lifecycle.New(cfg, rt, store, log)
}

// shutdownTimeout bounds each step of a shutdown: the requests in flight,
// then the lifecycle's background work.
const shutdownTimeout = 30 * time.Second

// fdReserve is the file descriptors kept for everything but client
// connections: the engine's socket, agent sessions, the store, files.
const fdReserve = 256

// maxConnections is the configured cap on client connections, lowered to
// leave fdReserve descriptors free when the file limit is smaller.
func maxConnections(configured, fileLimit int) int {
	if fileLimit > 0 && fileLimit-fdReserve < configured {
		return max(fileLimit-fdReserve, 16)
	}
	return configured
}
