package api

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestReadTimeout(t *testing.T) {
	never := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	req, _ := http.NewRequest(http.MethodGet, "http://sandbox/", nil)
	start := time.Now()
	_, err := readTimeout(never, 50*time.Millisecond).RoundTrip(req)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v", took)
	}
	if status, code, _ := backendFailure(err); status != http.StatusGatewayTimeout || code != codeBackendTimeout {
		t.Fatalf("a server that never answers: %v → %d %s, want 504 %s", err, status, code, codeBackendTimeout)
	}

	// Once the headers are in, the body streams past the timeout.
	slowBody := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		pr, pw := io.Pipe()
		go func() {
			time.Sleep(200 * time.Millisecond)
			select {
			case <-r.Context().Done():
				pw.CloseWithError(r.Context().Err())
			default:
				pw.Write([]byte("late"))
				pw.Close()
			}
		}()
		return &http.Response{StatusCode: http.StatusOK, Body: pr}, nil
	})
	resp, err := readTimeout(slowBody, 50*time.Millisecond).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "late" {
		t.Fatalf("body %q, %v", b, err)
	}

	// Other failures keep their own answer; 0 means no bound.
	broken := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, io.ErrUnexpectedEOF })
	if _, err := readTimeout(broken, time.Minute).RoundTrip(req); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("broken: %v", err)
	}
	if _, ok := readTimeout(broken, 0).(roundTripFunc); !ok {
		t.Fatal("a 0 timeout wraps the transport")
	}
}
