package lifecycle

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestRequestIDHandler(t *testing.T) {
	tests := []struct {
		name string
		ctx  context.Context
		want string // substring of the line; "" = no request_id at all
	}{
		{"request context", WithRequestID(context.Background(), "req-1"), "sandbox_id=sb request_id=req-1"},
		{"no request", context.Background(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(requestIDHandler{slog.NewTextHandler(&buf, nil)}).With("sandbox_id", "sb")
			log.InfoContext(tt.ctx, "sandbox created")
			line := buf.String()
			if tt.want == "" && strings.Contains(line, "request_id") {
				t.Errorf("line %q has a request_id", line)
			}
			if tt.want != "" && !strings.Contains(line, tt.want) {
				t.Errorf("line %q does not contain %q", line, tt.want)
			}
		})
	}
}
