package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
)

// genChunk is the write size of the generator.
const genChunk = 8 << 20

// makeDataset writes count files of size random bytes into dir as
// rank-NNNNN.pt and returns their paths. Files already there with the right
// size are kept (a scratch directory given with -work is reused).
func makeDataset(dir string, count int, size int64, seed uint64) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for i := range count {
		p := filepath.Join(dir, fmt.Sprintf("rank-%05d.pt", i))
		paths = append(paths, p)
		if fi, err := os.Stat(p); err == nil && fi.Size() == size {
			continue
		}
		if err := writeRandomFile(p, size, seed+uint64(i)); err != nil {
			return nil, err
		}
	}
	return paths, nil
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
	free <- make([]byte, genChunk)
	free <- make([]byte, genChunk)
	go func() {
		defer close(full)
		for left := size; left > 0; {
			b := <-free
			b = b[:min(int64(genChunk), left)]
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
