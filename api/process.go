package api

import (
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
)

// writeProcessMetrics adds the process gauges that leak checks watch:
// goroutines, open file descriptors and resident memory.
func writeProcessMetrics(w io.Writer) {
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	gauge("go_goroutines", "Goroutines of the sandboxd process.", int64(goruntime.NumGoroutine()))
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		gauge("process_open_fds", "Open file descriptors of the sandboxd process.", int64(len(fds)))
	}
	if statm, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(statm)); len(f) > 1 {
			if pages, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				gauge("process_resident_memory_bytes", "Resident memory of the sandboxd process.", pages*int64(os.Getpagesize()))
			}
		}
	}
}
