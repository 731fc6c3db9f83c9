package main

import (
	"testing"

	"github.com/sandboxd/sandboxd/cmd/internal/depaware"
)

// TestDepaware: depaware.txt lists exactly the packages outside the
// standard library that this command links.
func TestDepaware(t *testing.T) { depaware.Check(t) }
