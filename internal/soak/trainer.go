package soak

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
)

// trainer writes steps as torch.distributed.checkpoint's FileSystemWriter
// does: a step-N/ folder, one .distcp file per rank, then the coordinator's
// .metadata written as .metadata.tmp and renamed last.
type trainer struct {
	dir string
	buf []byte // random bytes, reused: every step differs by its first bytes
}

func newTrainer(dir string, largest int) (*trainer, error) {
	buf := make([]byte, largest)
	if _, err := rand.Read(buf); err != nil {
		return nil, fmt.Errorf("random data: %w", err)
	}
	return &trainer{dir: dir, buf: buf}, nil
}

func stepDir(step int) string { return fmt.Sprintf("step-%d", step) }

// write saves step with two rank files of size bytes each.
func (t *trainer) write(step, size int) error {
	dir := filepath.Join(t.dir, stepDir(step))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	for rank := range 2 {
		name := filepath.Join(dir, fmt.Sprintf("__%d_0.distcp", rank))
		if err := t.file(name, step*2+rank, size); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
	}
	meta := filepath.Join(dir, ".metadata")
	if err := t.file(meta+".tmp", -step, 512); err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	if err := os.Rename(meta+".tmp", meta); err != nil {
		return fmt.Errorf("step %d: publish .metadata: %w", step, err)
	}
	return nil
}

// file writes size bytes whose first 8 make the content unique to id, so
// no two files deduplicate.
func (t *trainer) file(name string, id, size int) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	head := []byte(fmt.Sprintf("%08x", uint32(id)))
	_, err = f.Write(head[:min(len(head), size)])
	if err == nil && size > len(head) {
		_, err = f.Write(t.buf[len(head):size])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// remove deletes a step as a trainer cleaning up its own saves does.
func (t *trainer) remove(step int) error {
	if err := os.RemoveAll(filepath.Join(t.dir, stepDir(step))); err != nil {
		return fmt.Errorf("delete step %d: %w", step, err)
	}
	return nil
}
