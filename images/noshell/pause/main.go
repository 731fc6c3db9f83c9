// Command pause is the only program in the sandboxd-test/noshell image: it
// does nothing until it is told to stop, so that tests have a container that
// stays up without any shell or tool inside.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As PID 1 a process gets no default signal handling, so without this
	// `docker stop` would have to wait for its timeout and kill.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
