package docker

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
)

// TestEnsureIsolatedNetwork: a missing network is created with
// inter-container traffic off and the labels; an existing one is used only
// if it has it off too; losing a creation race to another instance is fine.
func TestEnsureIsolatedNetwork(t *testing.T) {
	isolated := `{"Name":"sandboxd","Driver":"bridge","Options":{"` + iccOption + `":"false"}}`
	for _, tc := range []struct {
		name     string
		existing string // inspect answer before a create; "" = 404
		create   int    // status of the create
		wantErr  string
	}{
		{name: "missing", create: http.StatusCreated},
		{name: "isolated", existing: isolated},
		{name: "open", existing: `{"Name":"sandboxd","Driver":"bridge","Options":{}}`, wantErr: "lets its containers reach each other"},
		{name: "race", create: http.StatusConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var created atomic.Bool
			var body network.CreateRequest
			d := fakeEngine(t, time.Minute, false, map[string]http.HandlerFunc{
				"GET /networks/sandboxd": func(w http.ResponseWriter, _ *http.Request) {
					switch {
					case tc.existing != "":
						_, _ = w.Write([]byte(tc.existing))
					case created.Load():
						_, _ = w.Write([]byte(isolated))
					default:
						http.Error(w, `{"message":"network sandboxd not found"}`, http.StatusNotFound)
					}
				},
				"POST /networks/create": func(w http.ResponseWriter, r *http.Request) {
					_ = json.NewDecoder(r.Body).Decode(&body)
					created.Store(true) // by this call, or by the race's winner
					w.WriteHeader(tc.create)
					_, _ = w.Write([]byte(`{"Id":"n1","message":"exists"}`))
				},
			})
			err := d.EnsureIsolatedNetwork(context.Background(), "sandboxd", map[string]string{"l": "v"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.existing != "" {
				if created.Load() {
					t.Error("created a network that exists")
				}
				return
			}
			if body.Driver != "bridge" || body.Options[iccOption] != "false" || body.Labels["l"] != "v" {
				t.Errorf("create request %+v", body)
			}
		})
	}
}
