package restore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/blake3tree"
)

// ErrHashMismatch is returned (wrapped) when a downloaded file does not hash
// to the manifest's BLAKE3 twice in a row: the stored object is not what
// was committed, which downloading again will not fix.
var ErrHashMismatch = errors.New("BLAKE3 mismatch")

// Distruster is a store whose bytes may come from somewhere less trusted
// than the bucket: the store Options.Peers returns (internal/peer), which
// serves ranges from other nodes. A restore that finds a file's bytes
// failing the manifest's BLAKE3 calls Distrust with the file's key before
// fetching it once more; from then on the store reads key from the bucket
// alone and stops trusting whoever sent those bytes.
type Distruster interface {
	Distrust(key string)
}

// restoreFile keeps a correct existing copy of one file or downloads it,
// once more after a hash mismatch (a byte flipped in transit should not fail
// a long restore), then fails.
func (r *restorer) restoreFile(ctx context.Context, job *fileJob, seq int) error {
	if keep, err := r.keep(ctx, job); err != nil || keep {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := r.download(ctx, job, seq)
		if err == nil {
			r.mu.Lock()
			r.downloaded++
			r.mu.Unlock()
			r.log.Debug("restored file", zap.String("path", job.file.Path), zap.Int64("size", job.file.Size))
			return nil
		}
		if attempt > 1 || !errors.Is(err, ErrHashMismatch) || ctx.Err() != nil {
			return asDamage(job, err)
		}
		if d, ok := r.store.(Distruster); ok {
			d.Distrust(job.file.Key)
		}
		r.log.Warn("downloading file again", zap.String("path", job.file.Path), zap.Error(err))
	}
}

// keep keeps job's file when a correct copy is already at its final path
// (keepExisting), counting it as kept and done, and reports whether it did.
func (r *restorer) keep(ctx context.Context, job *fileJob) (bool, error) {
	keep, err := r.keepExisting(ctx, job)
	if err == nil && !keep {
		keep, err = r.resumeStaged(ctx, job)
	}
	if err != nil {
		return false, fmt.Errorf("check existing %s: %w", job.file.Path, err)
	}
	if keep {
		r.mu.Lock()
		r.kept++
		r.mu.Unlock()
		r.progress(job, job.file.Size)
		r.log.Debug("kept existing file", zap.String("path", job.file.Path))
	}
	return keep, nil
}

// afterExistingLstat, when set by a test, runs between keepExisting's
// look at a final path and its open, where a swap would land.
var afterExistingLstat func(rel string)

// keepExisting reports whether the final path already holds a regular file
// with the manifest's size and BLAKE3, as after an interrupted restore.
func (r *restorer) keepExisting(ctx context.Context, job *fileJob) (bool, error) {
	if job.absent {
		return false, nil // its folder did not exist when planning began
	}
	fi, err := r.root.Lstat(job.rel)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != job.file.Size {
		return false, nil
	}
	if afterExistingLstat != nil {
		afterExistingLstat(job.rel)
	}
	// Non-blocking: a FIFO swapped in since the Lstat must not hang the
	// restore in open (the Stat below then tells it from the file).
	f, err := r.root.OpenFile(job.rel, os.O_RDONLY|openNonBlock, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	// The path was a regular file a moment ago; make sure it still is the
	// same one and not a symlink or a FIFO swapped in (whose inode number
	// may be the freed file's).
	if st, err := f.Stat(); err != nil || !os.SameFile(fi, st) || !st.Mode().IsRegular() {
		return false, err
	}
	sum, err := r.hashFile(ctx, f, job.file.Size)
	if err != nil {
		return false, err
	}
	return sum == job.file.BLAKE3, nil
}

// download fetches one file into a temp file beside its final path,
// verifies it and stages it for commit. On any error the temp file is
// removed; the final path is never touched here.
func (r *restorer) download(ctx context.Context, job *fileJob, seq int) (err error) {
	f, tmp, err := r.createTemp(job.rel)
	if err != nil {
		return fmt.Errorf("restore %s: %w", job.file.Path, err)
	}
	var align int64
	if r.opts.DirectIO && r.opts.ChunkSize >= directBufAlign {
		align = enableDirect(f)
	}
	t := newTransfer(job, seq, f, r.opts.ChunkSize, align)
	placed := false
	defer func() {
		r.queue.drop(t) // after this no worker writes to f
		r.mu.Lock()
		r.fetched += t.written
		r.mu.Unlock()
		if !placed {
			f.Close()
			r.root.Remove(tmp)
		}
	}()
	size := job.file.Size
	if align > 0 {
		size = (size + align - 1) &^ (align - 1)
	}
	// Direct writes land in reserved extents that workers fill in
	// parallel, and a durable restore fails a full disk before it moves
	// gigabytes. Buffered writes skip it: ext4 and xfs reserve space at
	// write time (a full disk fails the write, naming the file), and
	// writing through the page cache into unwritten extents cost about 15%
	// more CPU in an A/B (2 x 2 GiB restores each).
	if (align > 0 || r.opts.Fsync) && r.holdsClaimedSize(ctx, job) {
		if err := preallocate(f, size); err != nil {
			return fmt.Errorf("restore %s: %w", job.file.Path, err)
		}
	}
	r.queue.push(t) // a 0-byte file has no chunks: nothing to GET
	sum, err := r.awaitSum(ctx, t)
	if err != nil {
		return fmt.Errorf("download %s: %w", job.file.Path, err)
	}
	if sum != job.file.BLAKE3 {
		return fmt.Errorf("restore %s: %w: got %s, manifest says %s", job.file.Path, ErrHashMismatch, sum, job.file.BLAKE3)
	}
	if align > 0 {
		// Drop the padding of the last block and the preallocation past it.
		if err := f.Truncate(job.file.Size); err != nil {
			return fmt.Errorf("restore %s: %w", job.file.Path, err)
		}
	}
	if err := r.stage(f, tmp, job); err != nil {
		return fmt.Errorf("restore %s: %w", job.file.Path, err)
	}
	placed = true
	if align > 0 {
		r.mu.Lock()
		r.direct++
		r.mu.Unlock()
	}
	return nil
}

// holdsClaimedSize reports whether a file is worth preallocating: it takes
// more than one GET, and its object holds the bytes the manifest claims
// (one HEAD). The manifest is untrusted until the bytes hash right: a size
// of terabytes for a small object must not reserve terabytes of disk
// before the first GET shows the object short. A failed HEAD only skips
// the preallocation; the GETs report what is wrong.
func (r *restorer) holdsClaimedSize(ctx context.Context, job *fileJob) bool {
	if job.file.Size <= r.opts.ChunkSize {
		return false
	}
	info, err := r.bucket.Head(ctx, job.file.Key)
	return err == nil && info.Size >= job.file.Offset+job.file.Size
}

// awaitSum waits for every chunk of t and returns the file's lower-case hex
// BLAKE3 from the chunks' subtrees, or the first chunk error.
func (r *restorer) awaitSum(ctx context.Context, t *transfer) (string, error) {
	for {
		ended, err := t.state()
		if err != nil {
			return "", err
		}
		if ended {
			break
		}
		select {
		case <-t.wake:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	switch t.chunks {
	case 0:
		return emptySum, nil
	case 1:
		return t.sum, nil
	}
	return blake3tree.Sum(t.nodes)
}

// emptySum is the BLAKE3 of no bytes.
const emptySum = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"

// hashScratch is a read-back buffer and hasher for checking existing files.
type hashScratch struct {
	buf []byte
	h   *blake3.Hasher
}

// hashFile returns the BLAKE3 of the first size bytes of f.
func (r *restorer) hashFile(ctx context.Context, f *os.File, size int64) (string, error) {
	s := r.hashBufs.Get().(*hashScratch)
	defer r.hashBufs.Put(s)
	s.h.Reset()
	var hashed int64
	for hashed < size {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.ReadAt(s.buf[:min(size-hashed, int64(len(s.buf)))], hashed)
		s.h.Write(s.buf[:n])
		hashed += int64(n)
		if err != nil && !(err == io.EOF && hashed == size) {
			return "", err
		}
	}
	return hex.EncodeToString(s.h.Sum(nil)), nil
}
