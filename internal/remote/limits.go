package remote

import (
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// The format and the stores state the object limits each (package manifest
// checks a file's part_size without depending on internal/store): a
// difference is a constant that overflows uint64, so this does not compile
// unless the two agree.
const (
	_ = uint64(manifest.MaxSinglePut-store.MaxSinglePut) + uint64(store.MaxSinglePut-manifest.MaxSinglePut)
	_ = uint64(manifest.MinPartSize-store.MinPartSize) + uint64(store.MinPartSize-manifest.MinPartSize)
	_ = uint64(manifest.MaxPartSize-store.MaxPartSize) + uint64(store.MaxPartSize-manifest.MaxPartSize)
	_ = uint64(manifest.MaxParts-store.MaxParts) + uint64(store.MaxParts-manifest.MaxParts)
)
