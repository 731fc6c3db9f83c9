package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/api/mcp"
	"github.com/sandboxd/sandboxd/cmd/sandboxd/cli"
)

// runMCP serves the MCP tools over stdio for a client that starts
// `sandboxd mcp` as its subprocess; the tools call a running sandboxd,
// found like the client commands find it. stdout carries only the
// protocol; errors go to stderr.
func runMCP(args []string) error {
	flags := flag.NewFlagSet("sandboxd mcp", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: sandboxd mcp [--domain HOST:PORT|URL] [--api-key KEY] [--config PATH] [--no-create]\n"+
			"  serve MCP tools over stdio against a running sandboxd (see docs/mcp.md)")
		flags.PrintDefaults()
	}
	configPath := flags.String("config", "", "config file to take the server and key from (default $SANDBOX_CONFIG_PATH or ~/.sandbox.toml)")
	domain := flags.String("domain", "", "server as host:port or URL (default $OPEN_SANDBOX_DOMAIN, else the config file)")
	key := flags.String("api-key", "", "API key (default $OPEN_SANDBOX_API_KEY, else the config file); prefer the environment, which other users cannot read")
	noCreate := flags.Bool("no-create", false, "leave out the tools that create sandboxes: only existing ones can be used")
	timeout := flags.Duration("request-timeout", 10*time.Minute, "longest wait for one request to the server (commands and code runs included)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("mcp takes no arguments, got %q", flags.Args())
	}
	if *key != "" {
		// The flag wins over the environment and the file.
		if err := os.Setenv("OPEN_SANDBOX_API_KEY", *key); err != nil {
			return err
		}
	}
	base, apiKey, err := cli.Target(*configPath, *domain)
	if err != nil {
		return err
	}
	ver, _ := build()
	srv := mcp.New(&mcp.API{Base: base, Key: apiKey, HTTP: &http.Client{Timeout: *timeout}}, mcp.Options{NoCreate: *noCreate, Version: ver})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = srv.Run(ctx, &sdk.StdioTransport{})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
