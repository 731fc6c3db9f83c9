package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The Kubernetes phase (-kubeconfig, with -start): a second sandboxd from
// the same binary with [runtime] type = "kubernetes" on that cluster (the
// e2e one: e2e/k8s/up.sh), in a namespace of its own, measured as the Docker
// figures are, in the same run: create-to-ready SDK-style and `true` round
// trips through the proxy. Each row's baseline is the same figure of
// sandboxd on Docker.

type kubernetesResult struct {
	creates, commands durations
}

func (b *bench) kubernetes(ctx context.Context) (res kubernetesResult, err error) {
	ns := "bench-" + b.r.run
	kubectl := func(args ...string) error {
		out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", b.o.kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := kubectl("create", "namespace", ns); err != nil {
		return res, err
	}
	defer func() {
		// Deleting the namespace deletes every pod the phase left.
		_ = exec.Command("kubectl", "--kubeconfig", b.o.kubeconfig, "delete", "namespace", ns, "--wait=false").Run()
	}()
	// Pods are admitted once the controller-manager made the default ServiceAccount.
	for deadline := time.Now().Add(time.Minute); kubectl("-n", ns, "get", "serviceaccount", "default") != nil; {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("no default ServiceAccount in %s after a minute", ns)
		}
		time.Sleep(250 * time.Millisecond)
	}
	srv, err := startServer(b.o.start, false, b.o.transport, "", fmt.Sprintf(
		"\n[runtime]\ntype = \"kubernetes\"\n\n[kubernetes]\nkubeconfig_path = %q\nnamespace = %q\nagent_image = %q\nimage_pull_policy = \"IfNotPresent\"\n",
		b.o.kubeconfig, ns, b.o.k8sAgentImage))
	if err != nil {
		return res, fmt.Errorf("sandboxd on Kubernetes: %w", err)
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(os.Stderr, "the Kubernetes sandboxd's log ends with:\n%s", srv.logTail(40))
		}
		srv.stop()
	}()
	a := newAPI(srv.url, srv.key)
	req := b.coldRequest()
	for i := range b.o.creates {
		b.progress("kubernetes create-to-ready %d/%d", i+1, b.o.creates)
		bx, d, err := a.createReady(ctx, req)
		if err != nil {
			return res, fmt.Errorf("kubernetes create: %w", err)
		}
		res.creates = append(res.creates, d)
		if i < b.o.creates-1 {
			if err := a.delete(ctx, bx.id); err != nil {
				return res, err
			}
			continue
		}
		b.progress("kubernetes commands (%d)", b.o.commands)
		for range b.o.commands {
			d, err := bx.command(ctx, "true", "")
			if err != nil {
				return res, fmt.Errorf("kubernetes command: %w", err)
			}
			res.commands = append(res.commands, d)
		}
		if err := a.delete(ctx, bx.id); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (r *report) kubernetesRows(k kubernetesResult, cold coldResult, cmd commandResult) {
	r.latency("kubernetes create-to-ready p50 (vs Docker's)", k.creates.pct(50), cold.sandboxd.pct(50), 0, 0)
	r.latency("kubernetes create-to-ready p95 (vs Docker's)", k.creates.pct(95), cold.sandboxd.pct(95), 0, 0)
	r.latency("kubernetes command true p50 (vs Docker's)", k.commands.pct(50), cmd.trueCmd.pct(50), 0, 0)
	r.latency("kubernetes command true p99 (vs Docker's)", k.commands.pct(99), cmd.trueCmd.pct(99), 0, 0)
}
