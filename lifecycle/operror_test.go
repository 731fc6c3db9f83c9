package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtime"
)

func TestOpError(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name string
		err  error
		kind Kind
		code string
	}{
		{"engine unreachable", fmt.Errorf("remove container x: %w", runtime.ErrUnavailable), KindUnavailable, CodeEngineUnavailable},
		{"engine call timed out", context.DeadlineExceeded, KindUnavailable, CodeEngineUnavailable},
		{"engine refused", errors.New("could not kill running container"), KindInternal, CodeDeleteFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.m.d.opError(tt.err, CodeDeleteFailed, "delete sandbox x")
			wantCode(t, err, tt.kind, tt.code)
			if e, _ := AsError(err); tt.kind == KindInternal && !strings.Contains(e.Message, tt.err.Error()) {
				t.Errorf("message %q does not give the engine's reason %q", e.Message, tt.err)
			}
		})
	}
}
