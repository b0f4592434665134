package copier

import (
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/manifest"
)

// Packs (manifest format 3) hold several small files in one object that
// was written with one PUT. The copier sends a pack once, whole, to the
// destination key it maps the pack's key to, with one GET, a check of
// every member's BLAKE3 over its range, and one PUT; the members keep
// their Offset and PackSize. A pack larger than maxPack is refused rather
// than sent in parts: ferry writes packs of at most 16 MiB, and a pack
// must stay a one-PUT object.

// maxPack is the largest pack the copier copies, through one buffer.
const maxPack = 64 << 20

// packMembers groups the packed files of files by the key of their pack.
func packMembers(files []manifest.File) map[string][]manifest.File {
	packs := map[string][]manifest.File{}
	for _, f := range files {
		if f.Packed() {
			packs[f.Key] = append(packs[f.Key], f)
		}
	}
	return packs
}

// checkPackSize refuses the pack of f when it is over maxPack.
func checkPackSize(f manifest.File) error {
	if f.PackSize > maxPack {
		return fmt.Errorf("the source manifest packs %s into %s of %d bytes: the copier copies packs of at most %d bytes (ferry writes them of at most 16 MiB)",
			f.Path, f.Key, f.PackSize, maxPack)
	}
	return nil
}

// verifyMembers checks every file of the pack ob against its BLAKE3 over
// its range of buf, the pack's bytes. Bytes no file covers are not
// checked.
func (c *copier) verifyMembers(ob *object, buf []byte) error {
	for _, m := range ob.members {
		sum := blake3.Sum256(buf[m.Offset : m.Offset+m.Size])
		if got := hex.EncodeToString(sum[:]); got != m.BLAKE3 {
			return c.corruptFile(ob, m, fmt.Sprintf("its bytes %d-%d of the pack hash to %s", m.Offset, m.Offset+m.Size, got))
		}
	}
	return nil
}
