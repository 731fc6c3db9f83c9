package transfer

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// TestSpool: content up to the bound stays in memory, more goes to a temp
// file; either reads back whole with its size, and Close leaves no file.
func TestSpool(t *testing.T) {
	t.Parallel()
	const inMemory = 1 << 10
	dir := t.TempDir()
	for _, size := range []int{0, 10, inMemory, inMemory + 1, 3*bufferSize + 7} {
		data := bytes.Repeat([]byte("x"), size)
		s, err := Spooler{Dir: dir}.Spool(bytes.NewReader(data), inMemory)
		if err != nil {
			t.Fatalf("Spool(%d bytes): %v", size, err)
		}
		if inFile := s.file != nil; inFile != (size > inMemory) {
			t.Errorf("Spool(%d bytes): in a file %v, want %v", size, inFile, size > inMemory)
		}
		got, err := io.ReadAll(s)
		if err != nil {
			t.Fatal(err)
		}
		if s.Size != int64(size) || !bytes.Equal(got, data) {
			t.Errorf("Spool(%d bytes): Size %d, read %d bytes", size, s.Size, len(got))
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("Spool(%d bytes): %d files left behind", size, len(left))
		}
	}
}

// TestSpoolFile: a Spooled filled by writing reads back what was written.
func TestSpoolFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Spooler{Dir: dir}.File()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	io.WriteString(s, "first ")
	io.WriteString(s, "second")
	if err := s.Rewind(); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(s); string(got) != "first second" || s.Size != int64(len(got)) {
		t.Errorf("read %q, Size %d", got, s.Size)
	}
	mem := &Spooled{Reader: bytes.NewReader(nil)}
	if _, err := mem.Write([]byte("x")); err == nil {
		t.Error("a write to content in memory succeeded")
	}
	if err := mem.Rewind(); err == nil {
		t.Error("a rewind of content in memory succeeded")
	}
}
