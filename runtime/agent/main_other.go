//go:build !linux

package agent

import (
	"context"
	"errors"
	"log/slog"
)

// Main is `sandboxd agent`, which serves the execd API from inside a
// sandbox. Sandboxes are Linux containers; on other systems the command
// only explains that.
func Main(context.Context, []string, *slog.Logger) error {
	return errors.New("`sandboxd agent` only runs inside a Linux sandbox, where sandboxd starts it itself")
}
