package runtimetest

import (
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// The in-memory runtimes keep the contract the real ones do.
func TestConformance(t *testing.T) {
	spec := runtime.Spec{Image: "busybox", Cmd: []string{"sleep", "infinity"}}
	t.Run("Runtime", func(t *testing.T) { Conformance(t, New(time.Now), spec) })
	t.Run("Cluster", func(t *testing.T) { Conformance(t, NewCluster(time.Now), spec) })
}
