package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
)

// genChunk is the largest write of the generator.
const genChunk int64 = 8 << 20

// Names of the data sets; samples and summaries are tagged with them.
const (
	bigSet   = "big"
	smallSet = "small"
)

// smallFolders is how many rank folders the small-file set spreads over.
const smallFolders = 8

// dataset is one generated set of checkpoint files that the upload and
// restore comparison moves.
type dataset struct {
	name    string   // bigSet or smallSet
	dir     string   // where the files are
	rel     []string // their paths relative to dir, slash-separated
	size    int64    // bytes of each file
	folders int      // rank folders the files are spread over (0: none)
}

// bytes is the size of the whole set.
func (d *dataset) bytes() int64 { return int64(len(d.rel)) * d.size }

// paths returns where the set's files are under root (its own dir, or a
// restore's).
func (d *dataset) paths(root string) []string {
	out := make([]string, len(d.rel))
	for i, rel := range d.rel {
		out[i] = filepath.Join(root, filepath.FromSlash(rel))
	}
	return out
}

// source is the prefix a tool restores this set from: the tool's restore
// source for the big set, with the set's name appended for the others.
func (d *dataset) source(t tool) string {
	if d.name == bigSet {
		return t.restoreSource
	}
	return t.restoreSource + "-" + d.name
}

// info describes the set for the report.
func (d *dataset) info() setInfo {
	return setInfo{Name: d.name, Files: len(d.rel), FileSize: d.size, Folders: d.folders}
}

// bigNames names count files rank-NNNNN.pt, all in one folder.
func bigNames(count int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("rank-%05d.pt", i)
	}
	return out
}

// smallNames names count files rank-R/shard-NNNNN.pt, dealt round-robin
// over folders rank folders and numbered within each.
func smallNames(count, folders int) []string {
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("rank-%d/shard-%05d.pt", i%folders, i/folders)
	}
	return out
}

// makeDataset writes d's files of random bytes, file i from seed+i. Files
// already there with the right size are kept (a scratch directory given
// with -work is reused).
func makeDataset(d *dataset, seed uint64) error {
	for i, p := range d.paths(d.dir) {
		if fi, err := os.Stat(p); err == nil && fi.Size() == d.size {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("create folder of %s: %w", d.rel[i], err)
		}
		if err := writeRandomFile(p, d.size, seed+uint64(i)); err != nil {
			return fmt.Errorf("write %s: %w", d.rel[i], err)
		}
	}
	return nil
}

// writeRandomFile writes size bytes from a ChaCha8 stream to path and
// fsyncs it. Generating and writing overlap: the generator fills one buffer
// while the other is written.
func writeRandomFile(path string, size int64, seed uint64) (err error) {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path + ".tmp")
		}
	}()
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	rng := rand.NewChaCha8(key)
	free := make(chan []byte, 2)
	full := make(chan []byte, 2)
	chunk := min(genChunk, size) // small files need no 8 MiB buffers
	free <- make([]byte, chunk)
	free <- make([]byte, chunk)
	go func() {
		defer close(full)
		for left := size; left > 0; {
			b := <-free
			b = b[:min(chunk, left)]
			_, _ = rng.Read(b)
			left -= int64(len(b))
			full <- b
		}
	}()
	var werr error
	for b := range full {
		if werr == nil {
			_, werr = f.Write(b)
		}
		free <- b[:cap(b)]
	}
	if werr != nil {
		return werr
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// freeBytes returns the bytes available to us on the filesystem of dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
