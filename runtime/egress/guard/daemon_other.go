//go:build !linux

package guard

import (
	"context"
	"errors"
	"log/slog"
)

// Main is `sandboxd egress`, which runs in a Linux egress helper; on other
// systems the command only explains that.
func Main(context.Context, []string, *slog.Logger) error {
	return errors.New("`sandboxd egress` only runs inside a Linux egress helper, where sandboxd starts it itself")
}
