package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runtime"
)

// TestRemoveRetries runs Remove against a fake engine that answers the
// first removals with the given statuses, then 204.
func TestRemoveRetries(t *testing.T) {
	tests := []struct {
		name     string
		answers  []int // statuses before 204
		wantErr  bool
		wantIs   error // a sentinel the error must match, if any
		wantHits int
	}{
		{"removed at once", nil, false, nil, 1},
		{"refused once", []int{500}, false, nil, 2},
		{"gone on retry", []int{500, 404}, true, runtime.ErrNotFound, 2},
		{"refused every time", []int{500, 500, 500}, true, nil, removeAttempts},
		{"not found is final", []int{404}, true, runtime.ErrNotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int32
			engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/_ping") {
					w.Header().Set("API-Version", "1.41")
					return
				}
				if r.Method != http.MethodDelete || !strings.HasSuffix(r.URL.Path, "/containers/c1") {
					http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
					return
				}
				n := int(hits.Add(1))
				if n <= len(tt.answers) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(tt.answers[n-1])
					io.WriteString(w, `{"message":"tried to kill container, but did not receive an exit event"}`)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			defer engine.Close()
			d, err := New(context.Background(), Options{Host: "tcp://" + engine.Listener.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			d.removeRetryDelay = time.Millisecond
			err = d.Remove(context.Background(), "c1")
			if (err != nil) != tt.wantErr || (tt.wantIs != nil && !errors.Is(err, tt.wantIs)) {
				t.Errorf("Remove: %v, want error %v matching %v", err, tt.wantErr, tt.wantIs)
			}
			if got := int(hits.Load()); got != tt.wantHits {
				t.Errorf("the engine was asked %d times, want %d", got, tt.wantHits)
			}
		})
	}
}
