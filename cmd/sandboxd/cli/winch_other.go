//go:build !unix

package cli

// onResize does nothing where terminals send no SIGWINCH; the size set at
// start stays.
func onResize(func()) (stop func()) { return func() {} }
