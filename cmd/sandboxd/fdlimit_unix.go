//go:build unix

package main

import "syscall"

// fileLimit returns the soft limit of open file descriptors, 0 if unknown.
// Go's runtime has already raised it to the hard limit at start (since Go
// 1.19), so it is what the process can use.
func fileLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
