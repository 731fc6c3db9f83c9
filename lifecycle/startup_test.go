package lifecycle

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestCreateEntrypointExitsAtOnce: a container whose entrypoint ended
// before its agent answered fails the create with the exit code, the
// entrypoint and the container's output, and leaves nothing behind; a
// container that runs but whose agent is not ready yet is still created.
func TestCreateEntrypointExitsAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	req := validRequest()
	req.Entrypoint = []string{"/no/such/binary", "--flag"}
	for _, code := range []int{127, 0} {
		e.rt.ExitOnStart(code)
		_, err := e.m.Sandboxes.Create(context.Background(), req)
		wantCode(t, err, KindInternal, CodeStartFailed)
		msg := err.(*Error).Message
		for _, want := range []string{`["/no/such/binary", "--flag"]`, "exited with code " + strconv.Itoa(code), "hello from the sandbox"} {
			if !strings.Contains(msg, want) {
				t.Errorf("exit %d: message %q lacks %q", code, msg, want)
			}
		}
		if hint := strings.Contains(msg, "not found in the image"); hint != (code == 127) {
			t.Errorf("exit %d: message %q: the not-found hint is there: %v", code, msg, hint)
		}
		if recs, _ := e.store.Sandboxes(); len(recs) != 0 {
			t.Errorf("exit %d: failed create left records: %+v", code, recs)
		}
		if left, _ := e.rt.List(context.Background(), map[string]string{LabelInstance: e.m.Instance()}); len(left) != 0 {
			t.Errorf("exit %d: failed create left %d container(s)", code, len(left))
		}
	}
	if got := e.m.Metrics().CreateFailures.Load(); got != 2 {
		t.Errorf("create failures = %d, want 2", got)
	}

	// Running but the agent answers 500: created, the first request retries.
	e.rt.ExitOnStart(-1)
	e.rt.SetAgent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	sb, err := e.m.Sandboxes.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create with a slow agent: %v", err)
	}
	if sb.Status.State != "Running" {
		t.Errorf("state %q, want Running", sb.Status.State)
	}
}
