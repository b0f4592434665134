// Package pagecache lets a reader leave the page cache as it found it: it
// records which pages of a file were cached before the reader pulled the
// file in, and afterwards drops only the pages the reader brought in. The
// agent uploads checkpoints of hundreds of GB; without this, reading them
// would evict the trainer's data set, while the pages of a checkpoint the
// trainer has just written (still cached) stay as the kernel decides.
package pagecache

// Residency is which pages of a file were in the page cache at Snapshot.
type Residency struct {
	size   int64
	cached []byte // one byte per page; bit 0 set = resident
}
