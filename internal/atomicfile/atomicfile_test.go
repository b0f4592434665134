package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Both writers replace the file whole, create its folder, set the mode and
// leave no temp file behind.
func TestWriteReplacesWhole(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{"durable": Write, "cached": WriteCached} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sub")
			path := filepath.Join(dir, "state.json")
			for _, data := range []string{"first, longer content", "second"} {
				if err := write(path, []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != data {
					t.Fatalf("read back %q, %v; want %q", got, err, data)
				}
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, %v; want 0600", fi.Mode(), err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("%d entries in the folder, want the file alone", len(ents))
			}
		})
	}
}

// A write into a folder that cannot be created fails with the path named
// and leaves the old file as it was.
func TestWriteFailsWhole(t *testing.T) {
	dir := t.TempDir()
	block := filepath.Join(dir, "file")
	if err := os.WriteFile(block, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(block, "state.json"), []byte("y"), 0o600); err == nil {
		t.Fatal("write under a regular file: no error")
	}
	if got, _ := os.ReadFile(block); string(got) != "x" {
		t.Errorf("file under the failed write now %q", got)
	}
}
