//go:build linux

package agent

import (
	"io"
	"log/slog"
	"os"
	"testing"
)

// TestOutputLogLeavesNoFile: a background command's output is kept in a
// file without a name, so that no other user of the sandbox, and no
// snapshot of its filesystem, ever finds it; it still reads back by line.
func TestOutputLogLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	l := newOutputLog(dir, "cmd-1", slog.New(slog.DiscardHandler))
	defer l.release()
	if l.file == nil {
		t.Fatal("output kept in memory, want an (unlinked) file")
	}
	l.write([]byte("one\ntwo\n"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("temp dir holds %v while the command runs, want nothing", entries)
	}
	r, next, err := l.linesAfter(1, true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	if string(got) != "two\n" || next != 2 {
		t.Errorf("lines after 1: %q (next %d), want %q (next 2)", got, next, "two\n")
	}
}
