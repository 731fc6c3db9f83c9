//go:build linux

package kubernetes

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/lifecycle"
)

// lifecycle over this runtime, on client-go's fake clientset with the
// agent served in process, leading through the Lease and keeping records
// on the pods: a sandbox is created as a pod, reached through its agent,
// refused what a pod cannot do, and deleted with its pod.
func TestLifecycleOverKubernetes(t *testing.T) {
	_, k, _ := fakeCluster()
	cfg := config.Default()
	cfg.Runtime.Type = "kubernetes"
	store, err := lifecycle.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := lifecycle.New(cfg, k, lifecycle.StoreFor(k, store), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for m.Ready() != nil {
		if ctx.Err() != nil {
			t.Fatal("lifecycle never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}

	timeout := 600
	sb, err := m.Sandboxes.Create(ctx, lifecycle.CreateRequest{
		Image: &lifecycle.ImageSpec{URI: "busybox"}, Entrypoint: []string{"tail", "-f", "/dev/null"},
		Timeout: &timeout, Metadata: map[string]string{"team": "fake"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := k.Inspect(ctx, "sandbox-"+sb.ID)
	if err != nil || pod.Labels["team"] != "fake" || pod.Labels[lifecycle.LabelID] != sb.ID {
		t.Fatalf("pod of sandbox %s: %+v, %v", sb.ID, pod, err)
	}
	// The record lives on the pod, for every replica.
	if rec, err := k.Record(ctx, "sandbox-"+sb.ID); err != nil || !strings.Contains(string(rec), sb.ID) {
		t.Errorf("record on the pod: %s, %v", rec, err)
	}
	rt, err := m.Sandboxes.Transport(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, rt, "echo in-pod", "in-pod")
	err = m.Sandboxes.Pause(ctx, sb.ID)
	var le *lifecycle.Error
	if !errors.As(err, &le) || le.Code != "SANDBOX::API_NOT_SUPPORTED" || !strings.Contains(le.Message, "kubernetes") {
		t.Errorf("Pause = %v, want upstream's not-supported refusal naming the runtime", err)
	}
	if err := m.Sandboxes.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Sandboxes.Get(ctx, sb.ID); err == nil {
		t.Error("sandbox still there after Delete")
	}
	if list, _ := k.List(ctx, nil); len(list) != 0 {
		t.Errorf("%d pods left after Delete", len(list))
	}
}
