//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// onResize calls fn whenever the terminal's size changes, until the
// returned stop is called.
func onResize(fn func()) (stop func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			fn()
		}
	}()
	return func() { signal.Stop(winch); close(winch) }
}
