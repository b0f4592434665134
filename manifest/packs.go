package manifest

import (
	"fmt"
	"strings"
)

// Packs. Across the internet every request costs a round trip, so a
// checkpoint of thousands of small files (Megatron's and Orbax's shards,
// DCP's per-thread files, the JSON beside safetensors) is mostly round
// trips when each file is an object. A writer may instead pack small files
// into one object: each packed file records the object (Key), the object's
// size (PackSize) and where its bytes start in it (Offset). A reader then
// fetches a run of neighbouring files with one ranged GET and still checks
// each file against its own BLAKE3. A pack is written with one PUT, and
// only whole files are packed: a file's bytes are contiguous in its pack.

// PackedFormat is the format version of a manifest with packed files,
// sharded or not: 1.x and 2.x readers, which would read a pack as one file,
// reject it and say to upgrade.
const PackedFormat = "3.0"

// Packed reports whether the file's bytes are a range of a pack object
// rather than an object of their own.
func (f File) Packed() bool { return f.PackSize > 0 }

// ObjectSize is the size of the object Key: the pack's for a packed file,
// the file's own otherwise.
func (f File) ObjectSize() int64 {
	if f.Packed() {
		return f.PackSize
	}
	return f.Size
}

// HasPacks reports whether any file is packed.
func HasPacks(files []File) bool {
	for _, f := range files {
		if f.Packed() {
			return true
		}
	}
	return false
}

// FormatFor returns the version a document of format with these files
// must declare: PackedFormat when any file is packed and format is older,
// format otherwise.
func FormatFor(format string, files []File) string {
	major, _, _ := strings.Cut(format, ".")
	if major != "1" && major != "2" || !HasPacks(files) {
		return format
	}
	return PackedFormat
}

// PackSep follows the attempt in a pack's key (PackKey): the packs of an
// attempt are the keys that start with its folder's key, less its "/",
// and PackSep.
const PackSep = ".pack-"

// PackKey is the object key of pack name written by one push attempt:
// beside the attempt's folder of files (whose keys all continue with "/"),
// so that no file path can name it.
func PackKey(prefix string, step int64, attempt, name string) string {
	return DataPrefix(prefix) + StepString(step) + "/" + attempt + PackSep + name
}

// checkPack checks a file's pack fields: only format 3 packs, a pack holds
// the file's bytes, is written with one PUT, and every file naming the same
// object agrees on its size (packs maps the keys seen to their sizes, 0
// for an unpacked file's object).
func checkPack(f File, major string, packs map[string]int64) error {
	if prev, seen := packs[f.Key]; seen && prev != f.PackSize {
		return fmt.Errorf("object %q is named with object sizes %d and %d", f.Key, prev, f.PackSize)
	}
	packs[f.Key] = f.PackSize
	switch {
	case !f.Packed() && f.Offset != 0:
		return fmt.Errorf("offset %d without a pack_size", f.Offset)
	case !f.Packed():
		return nil
	case major != "3":
		return fmt.Errorf("pack_size %d in a format %s manifest (packs need format 3)", f.PackSize, major)
	case f.PackSize > MaxSinglePut:
		return fmt.Errorf("pack_size %d over %d", f.PackSize, int64(MaxSinglePut))
	case f.PartSize != 0:
		return fmt.Errorf("part_size %d for a packed file (packs are one PUT)", f.PartSize)
	case f.Offset < 0 || f.Offset > f.PackSize-f.Size:
		return fmt.Errorf("offset %d and size %d outside its pack of %d bytes", f.Offset, f.Size, f.PackSize)
	}
	return nil
}
