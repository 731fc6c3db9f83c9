package main

import "testing"

func TestMaxConnections(t *testing.T) {
	tests := []struct{ configured, fileLimit, want int }{
		{4096, 0, 4096},       // no limit known
		{4096, 1 << 20, 4096}, // the configured cap is lower
		{4096, 1024, 1024 - fdReserve},
		{4096, 100, 16}, // never below a handful
		{100, 1024, 100},
	}
	for _, tt := range tests {
		if got := maxConnections(tt.configured, tt.fileLimit); got != tt.want {
			t.Errorf("maxConnections(%d, %d) = %d, want %d", tt.configured, tt.fileLimit, got, tt.want)
		}
	}
}
