package steptest

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// File is a file of a step made by hand: its path in the step and its bytes.
type File struct {
	Path string
	Data []byte
}

// BLAKE3 is the hex BLAKE3 of data, as a manifest records it.
func BLAKE3(data []byte) string {
	sum := blake3.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Pack lays files out as one pack object at key, as a packing uploader
// does: each file's bytes in turn, each followed by gap bytes no file covers
// (0xee). It returns the files' manifest entries (Path, Size, BLAKE3, Key,
// Offset and PackSize; the caller sets the rest, such as Rank) and the
// pack's bytes, which the caller writes (Put) or damages first.
func Pack(key string, gap int, files ...File) ([]manifest.File, []byte) {
	var pack []byte
	entries := make([]manifest.File, 0, len(files))
	for _, f := range files {
		entries = append(entries, manifest.File{Path: f.Path, Size: int64(len(f.Data)), BLAKE3: BLAKE3(f.Data), Key: key, Offset: int64(len(pack))})
		pack = append(pack, f.Data...)
		pack = append(pack, bytes.Repeat([]byte{0xee}, gap)...)
	}
	for i := range entries {
		entries[i].PackSize = int64(len(pack))
	}
	return entries, pack
}

// Entry is the manifest entry of f as an object of its own at key.
func Entry(key string, f File) manifest.File {
	return manifest.File{Path: f.Path, Size: int64(len(f.Data)), BLAKE3: BLAKE3(f.Data), Key: key}
}

// Put writes body as the object key, with its CRC32C for the server to
// check.
func Put(t testing.TB, st store.Store, key string, body []byte) {
	t.Helper()
	if _, err := st.Put(t.Context(), key, bytes.NewReader(body), int64(len(body)), store.PutOptions{CRC32C: store.CRC32C(body)}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}
