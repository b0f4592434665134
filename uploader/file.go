package uploader

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/pagecache"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var bufPool = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// uploadFile uploads one file, with a single PUT or as a multipart upload,
// and returns its manifest entry. Its part requests run in a group of their
// own (sendParts) and share the uploader's request slots with every other
// file.
func (u *Uploader) uploadFile(ctx context.Context, f File) (manifest.File, error) {
	fh, stamp, _, err := f.open()
	if err != nil {
		return manifest.File{}, fmt.Errorf("open: %w", err)
	}
	defer fh.Close()
	if u.opts.DropCache {
		defer u.leaveCache(fh, stamp.Size)()
	}
	mf := manifest.File{Path: f.RelPath, Size: stamp.Size, Key: f.Key, Rank: f.Rank, MTime: stamp.mtime()}
	if done, ok := u.alreadyDone(ctx, f, stamp); ok {
		mf.BLAKE3, mf.PartSize = done.BLAKE3, done.PartSize
		u.durable(stamp.Size)
		return mf, nil
	}
	if stamp.Size > u.singlePutLimit() {
		mf.PartSize = u.partSizeFor(f.Key, stamp.Size)
	}
	var pre *digest
	if f.Reuse != nil && f.Reuse.Size == stamp.Size && !u.sentEarly(f.Key) {
		if pre, err = u.digest(ctx, fh, stamp.Size, mf.PartSize); err != nil {
			return manifest.File{}, err
		}
		if pre.blake3 == f.Reuse.BLAKE3 {
			if err := checkUnchanged(f, stamp); err != nil {
				return manifest.File{}, err
			}
			mf.BLAKE3, mf.Key, mf.PartSize = pre.blake3, f.Reuse.Key, f.Reuse.PartSize
			mf.PackSize, mf.Offset = f.Reuse.PackSize, f.Reuse.Offset
			u.deduplicated(f, stamp.Size)
			return mf, nil
		}
	}
	if mf.PartSize == 0 {
		u.abortEarly(ctx, f.Key)
		mf.BLAKE3, err = u.putWhole(ctx, fh, f, stamp, pre)
	} else {
		mf.BLAKE3, err = u.putMultipart(ctx, fh, f, stamp, mf.PartSize, pre)
		if errors.Is(err, errRecordedParts) {
			u.opts.Logger.Info("the server refused the parts recorded as sent early; listing them", zap.String("file", f.RelPath), zap.Error(err))
			mf.BLAKE3, err = u.putMultipart(ctx, fh, f, stamp, mf.PartSize, pre)
		}
	}
	if err != nil {
		return manifest.File{}, err
	}
	u.stats.objects.Add(1)
	if st := u.opts.state; st != nil {
		done := doneObject{Stamp: stamp, BLAKE3: mf.BLAKE3, PartSize: mf.PartSize}
		if mf.PartSize == 0 {
			// One PUT: no save of the state per file (a fsync and a
			// rename each); after a crash the file is sent again.
			st.Note(f.Key, done)
		} else if err := st.Finish(f.Key, done); err != nil {
			return manifest.File{}, fmt.Errorf("record finished object: %w", err)
		}
	}
	return mf, nil
}

// deduplicated counts f, of size bytes, as unchanged since the earlier
// step whose object (f.Reuse) it references: durable, and not sent.
func (u *Uploader) deduplicated(f File, size int64) {
	u.stats.dedupFiles.Add(1)
	u.stats.dedupBytes.Add(size)
	u.durable(size)
	u.progress.Deduplicated(size)
	u.opts.Logger.Debug("unchanged since the previous step; referencing its object", zap.String("file", f.RelPath), zap.String("key", f.Reuse.Key))
}

// partSizeFor returns the part size of the file at key, of size bytes, sent
// in parts: that of the upload begun while it was written (SendEarly) when
// the file fits in store.MaxParts of them, so that its parts are kept, else
// objectPartSize's.
func (u *Uploader) partSizeFor(key string, size int64) int64 {
	if u.opts.state != nil {
		if up, ok := u.opts.state.Get(key); ok && up.Early && up.PartSize >= store.MinPartSize &&
			(size+up.PartSize-1)/up.PartSize <= store.MaxParts {
			return up.PartSize
		}
	}
	return objectPartSize(size, u.opts.PartSize)
}

// leaveCache records which pages of fh are cached and returns the function
// that, once the file is sent, drops those this upload pulled in. Failures
// only cost cache: they are logged at debug level.
func (u *Uploader) leaveCache(fh *os.File, size int64) func() {
	res, err := pagecache.Snapshot(fh, size)
	if err != nil {
		u.opts.Logger.Debug("page cache: no snapshot; the file's pages stay cached", zap.Error(err))
		return func() {}
	}
	return func() {
		if err := res.DropOthers(fh); err != nil {
			u.opts.Logger.Debug("page cache: could not drop pages", zap.Error(err))
		}
	}
}

// alreadyDone reports whether the resume state records f as already written
// whole, for this exact file content, and the object is still there with its
// size.
func (u *Uploader) alreadyDone(ctx context.Context, f File, stamp fileStamp) (doneObject, bool) {
	if u.opts.state == nil {
		return doneObject{}, false
	}
	done, ok := u.opts.state.GetDone(f.Key)
	if !ok || done.Stamp != stamp {
		return doneObject{}, false
	}
	info, err := u.opts.Store.Head(ctx, f.Key)
	if err != nil || info.Size != stamp.Size {
		return doneObject{}, false
	}
	u.opts.Logger.Debug("object already uploaded by an earlier run", zap.String("file", f.RelPath))
	return done, true
}

// digest is what one read of a whole file computes: its BLAKE3 and the
// CRC32C of each part it would be sent as (one for a single PUT).
type digest struct {
	blake3 string
	crcs   []uint32
}

// digest reads a file once, computing its BLAKE3 and the CRC32C of each
// part of partSize (0: one part). A file compared with an earlier step's
// object is read this way first: if it is unchanged nothing more is read;
// otherwise the send reads it again (from the page cache, usually) without
// hashing it again, so deduplication never adds a read.
func (u *Uploader) digest(ctx context.Context, fh *os.File, size, partSize int64) (*digest, error) {
	span, nparts := size, int64(1)
	if partSize > 0 {
		span, nparts = partSize, (size+partSize-1)/partSize
	}
	h := blake3.New()
	d := &digest{crcs: make([]uint32, 0, nparts)}
	for i := range nparts {
		off := i * span
		var crc uint32
		if err := u.hashRange(ctx, fh, off, min(span, size-off), h, func(b []byte) { crc = crc32.Update(crc, castagnoli, b) }); err != nil {
			return nil, err
		}
		d.crcs = append(d.crcs, crc)
	}
	d.blake3 = hex.EncodeToString(h.Sum(nil))
	return d, nil
}

// putWhole hashes a small file and sends it with one PUT. pre, when set,
// holds the hashes from an earlier read.
func (u *Uploader) putWhole(ctx context.Context, fh *os.File, f File, stamp fileStamp, pre *digest) (string, error) {
	if pre == nil {
		var err error
		if pre, err = u.digest(ctx, fh, stamp.Size, 0); err != nil {
			return "", err
		}
	}
	crc := pre.crcs[0]
	if err := u.acquire(ctx, stamp.Size); err != nil {
		return "", err
	}
	if err := u.sendHeld(ctx, stamp.Size, func() error {
		_, err := u.opts.Store.Put(ctx, f.Key, io.NewSectionReader(fh, 0, stamp.Size), stamp.Size,
			store.PutOptions{CRC32C: store.EncodeCRC32C(crc)})
		return err
	}); err != nil {
		return "", u.explain(f, stamp, fmt.Errorf("put object: %w", err))
	}
	if err := checkUnchanged(f, stamp); err != nil {
		return "", err
	}
	return pre.blake3, nil
}

// sendHeld runs one request in the concurrency slot the caller acquired,
// accounts its bytes and releases the slot.
func (u *Uploader) sendHeld(ctx context.Context, n int64, req func() error) error {
	defer u.release(n)
	if err := req(); err != nil {
		return err
	}
	u.stats.sent.Add(n)
	u.progress.Sent(n)
	u.durable(n)
	return nil
}

// explain turns a failed request into ErrFileChanged when the file changed
// under us, since that is the cause worth reporting (the server rejects a
// body whose CRC32C no longer matches).
func (u *Uploader) explain(f File, stamp fileStamp, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	if cerr := checkUnchanged(f, stamp); cerr != nil {
		return cerr
	}
	return err
}

// hashRange reads [off, off+n) of fh sequentially into h and onBlock.
func (u *Uploader) hashRange(ctx context.Context, fh *os.File, off, n int64, h io.Writer, onBlock func([]byte)) error {
	// Many files may be hashed at once (one per request in flight); their
	// read buffers are not: hashing is bound by CPU and disk.
	select {
	case u.hashing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-u.hashing }()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := buf
		if int64(len(chunk)) > n {
			chunk = chunk[:n]
		}
		r, err := fh.ReadAt(chunk, off)
		if r < len(chunk) {
			if err == nil || err == io.EOF {
				err = fmt.Errorf("%w: file shrank while being read", ErrFileChanged)
			}
			return fmt.Errorf("read at %d: %w", off, err)
		}
		h.Write(chunk)
		onBlock(chunk)
		off += int64(r)
		n -= int64(r)
		u.stats.hashed.Add(int64(r))
	}
	return nil
}
