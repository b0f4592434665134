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
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/pagecache"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var bufPool = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// uploadFile uploads one file, with a single PUT or as a multipart upload,
// and returns its manifest entry. Part requests run on g so that they share
// the uploader's concurrency with every other file.
func (u *Uploader) uploadFile(ctx context.Context, g *errgroup.Group, f File) (manifest.File, error) {
	fh, stamp, err := openRegular(f.LocalPath)
	if err != nil {
		return manifest.File{}, fmt.Errorf("open: %w", err)
	}
	defer fh.Close()
	if u.opts.DropCache {
		defer u.leaveCache(fh, stamp.Size)()
	}
	mf := manifest.File{Path: f.RelPath, Size: stamp.Size, Key: f.Key, Rank: f.Rank}
	if done, ok := u.alreadyDone(ctx, f, stamp); ok {
		mf.BLAKE3, mf.PartSize = done.BLAKE3, done.PartSize
		u.durable(stamp.Size)
		return mf, nil
	}
	if stamp.Size > u.singlePutLimit() {
		mf.PartSize = PartSizeFor(stamp.Size, u.opts.PartSize)
	}
	var pre *digest
	if f.Reuse != nil && f.Reuse.Size == stamp.Size && !u.sentEarly(f.Key) {
		if pre, err = u.digest(ctx, fh, stamp.Size, mf.PartSize); err != nil {
			return manifest.File{}, err
		}
		if pre.blake3 == f.Reuse.BLAKE3 {
			if err := checkUnchanged(f.LocalPath, stamp); err != nil {
				return manifest.File{}, err
			}
			mf.BLAKE3, mf.Key, mf.PartSize = pre.blake3, f.Reuse.Key, f.Reuse.PartSize
			u.stats.dedupFiles.Add(1)
			u.stats.dedupBytes.Add(stamp.Size)
			u.durable(stamp.Size)
			if u.opts.OnDedup != nil {
				u.opts.OnDedup(stamp.Size)
			}
			u.opts.Logger.Debug("unchanged since the previous step; referencing its object", zap.String("file", f.RelPath), zap.String("key", f.Reuse.Key))
			return mf, nil
		}
	}
	if mf.PartSize == 0 {
		u.abortEarly(ctx, f.Key)
		mf.BLAKE3, err = u.putWhole(ctx, fh, f, stamp, pre)
	} else {
		mf.BLAKE3, err = u.putMultipart(ctx, g, fh, f, stamp, mf.PartSize, pre)
	}
	if err != nil {
		return manifest.File{}, err
	}
	u.stats.objects.Add(1)
	if st := u.opts.State; st != nil {
		done := DoneObject{Stamp: stamp, BLAKE3: mf.BLAKE3, PartSize: mf.PartSize}
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

// sentEarly reports whether parts of the file at key were sent while it
// was written: then the rest is sent without comparing the file with the
// previous step's first (it is new, or its bytes are mostly on the server).
func (u *Uploader) sentEarly(key string) bool {
	if u.opts.State == nil {
		return false
	}
	up, ok := u.opts.State.Get(key)
	return ok && up.Early
}

// abortEarly aborts the upload begun while the file at key was written,
// for a file that ended up small enough for one PUT. A failure only leaves
// parts for the bucket's lifecycle rule.
func (u *Uploader) abortEarly(ctx context.Context, key string) {
	if !u.sentEarly(key) {
		return
	}
	up, _ := u.opts.State.Get(key)
	if err := u.opts.Store.AbortMultipart(ctx, key, up.UploadID); err != nil && !errors.Is(err, store.ErrNotExist) {
		u.opts.Logger.Warn("could not abort an unused multipart upload", zap.String("key", key), zap.Error(err))
	}
	if err := u.opts.State.Remove(key); err != nil {
		u.opts.Logger.Warn("could not update the upload state", zap.Error(err))
	}
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

// alreadyDone reports whether State records f as already written whole, for
// this exact file content, and the object is still there with its size.
func (u *Uploader) alreadyDone(ctx context.Context, f File, stamp fileStamp) (DoneObject, bool) {
	if u.opts.State == nil {
		return DoneObject{}, false
	}
	done, ok := u.opts.State.GetDone(f.Key)
	if !ok || done.Stamp != stamp {
		return DoneObject{}, false
	}
	info, err := u.opts.Store.Head(ctx, f.Key)
	if err != nil || info.Size != stamp.Size {
		return DoneObject{}, false
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
	if err := u.acquire(ctx); err != nil {
		return "", err
	}
	if err := u.sendHeld(ctx, stamp.Size, func() error {
		_, err := u.opts.Store.Put(ctx, f.Key, u.body(ctx, fh, 0, stamp.Size), stamp.Size,
			store.PutOptions{CRC32C: store.EncodeCRC32C(crc)})
		return err
	}); err != nil {
		return "", u.explain(f, stamp, fmt.Errorf("put object: %w", err))
	}
	if err := checkUnchanged(f.LocalPath, stamp); err != nil {
		return "", err
	}
	return pre.blake3, nil
}

// body returns the request body for n bytes of fh from off, paced by the
// bandwidth limiter when there is one.
func (u *Uploader) body(ctx context.Context, fh *os.File, off, n int64) io.ReadSeeker {
	r := io.NewSectionReader(fh, off, n)
	if u.opts.Limiter == nil {
		return r
	}
	return &ratelimit.Reader{R: r, L: u.opts.Limiter, Ctx: ctx}
}

// sendHeld runs one request in the concurrency slot the caller acquired,
// accounts its bytes and releases the slot.
func (u *Uploader) sendHeld(ctx context.Context, n int64, req func() error) error {
	defer u.release()
	if err := req(); err != nil {
		return err
	}
	u.stats.sent.Add(n)
	if u.opts.OnSent != nil {
		u.opts.OnSent(n)
	}
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
	if cerr := checkUnchanged(f.LocalPath, stamp); cerr != nil {
		return cerr
	}
	return err
}

// hashRange reads [off, off+n) of fh sequentially into h and onBlock.
func (u *Uploader) hashRange(ctx context.Context, fh *os.File, off, n int64, h io.Writer, onBlock func([]byte)) error {
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
		if u.opts.OnHashed != nil {
			u.opts.OnHashed(int64(r))
		}
	}
	return nil
}

// putMultipart hashes the file part by part and uploads each part as soon as
// its CRC32C is known, resuming an upload recorded in State if there is one.
// pre, when set, holds the hashes from an earlier read, which is not
// repeated.
func (u *Uploader) putMultipart(ctx context.Context, g *errgroup.Group, fh *os.File, f File, stamp fileStamp, partSize int64, pre *digest) (string, error) {
	up, held, err := u.openUpload(ctx, f, stamp, partSize)
	if err != nil {
		return "", err
	}
	nparts := int32((stamp.Size + partSize - 1) / partSize)
	parts := make([]store.Part, nparts)
	var pg sync.WaitGroup
	var errs firstError
	ph := newPartHashes(up.Early, nparts)
	for i := int32(0); i < nparts && errs.get() == nil; i++ {
		off := int64(i) * partSize
		size := min(partSize, stamp.Size-off)
		var crc uint32
		var digest string
		if pre != nil {
			crc = pre.crcs[i]
		} else if crc, digest, err = ph.hash(ctx, u, fh, i, off, size); err != nil {
			pg.Wait()
			return "", err
		}
		sum := store.EncodeCRC32C(crc)
		if p, ok := held[i+1]; ok && p.Size == size && p.CRC32C == sum && (!up.Early || up.Digests[i+1] == digest) {
			parts[i] = p
			u.stats.resumed.Add(1)
			u.durable(size)
			continue
		}
		if _, sentEarly := up.Digests[i+1]; sentEarly {
			u.stats.resent.Add(1) // rewritten since it was sent early
		}
		// The hasher takes the slot and hands it to the request, so it never
		// runs more than one part ahead of the sends.
		if err := u.acquire(ctx); err != nil {
			errs.set(err)
			break
		}
		pg.Add(1)
		g.Go(func() error {
			defer pg.Done()
			p, err := u.sendPart(ctx, fh, f, up.UploadID, i+1, off, size, sum)
			if err != nil {
				errs.set(u.explain(f, stamp, fmt.Errorf("upload part %d: %w", i+1, err)))
			}
			parts[i] = p
			return nil
		})
	}
	pg.Wait()
	if err := errs.get(); err != nil {
		return "", err
	}
	if err := checkUnchanged(f.LocalPath, stamp); err != nil {
		return "", err
	}
	if _, err := u.opts.Store.CompleteMultipart(ctx, f.Key, up.UploadID, parts); err != nil {
		return "", fmt.Errorf("complete multipart upload: %w", err)
	}
	if pre != nil {
		return pre.blake3, nil
	}
	return ph.sum()
}

// partHashes hashes a file part by part for putMultipart: in one
// sequential BLAKE3, or, for an upload begun while the file was written,
// as one BLAKE3 subtree per part, whose digests say which parts sent early
// still hold the file's bytes, combined into the file's BLAKE3 at the end.
type partHashes struct {
	whole *blake3.Hasher
	rng   *blake3tree.Range
	nodes []blake3tree.Node
}

func newPartHashes(perPart bool, nparts int32) *partHashes {
	if perPart {
		return &partHashes{rng: new(blake3tree.Range), nodes: make([]blake3tree.Node, nparts)}
	}
	return &partHashes{whole: blake3.New()}
}

// hash reads part i ([off, off+size)) once and returns its CRC32C and,
// per part, its digest.
func (ph *partHashes) hash(ctx context.Context, u *Uploader, fh *os.File, i int32, off, size int64) (crc uint32, digest string, err error) {
	onBlock := func(b []byte) { crc = crc32.Update(crc, castagnoli, b) }
	if ph.whole != nil {
		err = u.hashRange(ctx, fh, off, size, ph.whole, onBlock)
		return crc, "", err
	}
	if err := ph.rng.Reset(off); err != nil {
		return 0, "", err
	}
	if err := u.hashRange(ctx, fh, off, size, ph.rng, onBlock); err != nil {
		return 0, "", err
	}
	ph.nodes[i] = ph.rng.Node()
	return crc, ph.nodes[i].Digest(), nil
}

// sum returns the file's hex BLAKE3.
func (ph *partHashes) sum() (string, error) {
	if ph.whole != nil {
		return hex.EncodeToString(ph.whole.Sum(nil)), nil
	}
	return blake3tree.Sum(ph.nodes)
}

// sendPart uploads part n (bytes off..off+size of the file) in the slot
// the caller acquired.
func (u *Uploader) sendPart(ctx context.Context, fh *os.File, f File, uploadID string, n int32, off, size int64, sum string) (store.Part, error) {
	var part store.Part
	err := u.sendHeld(ctx, size, func() error {
		p, err := u.opts.Store.UploadPart(ctx, f.Key, uploadID, n, u.body(ctx, fh, off, size), size, sum)
		if err != nil {
			return err
		}
		p.Size = size
		part = p
		return nil
	})
	if err == nil {
		u.stats.parts.Add(1)
	}
	return part, err
}

// firstError keeps the first error of concurrent work.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (e *firstError) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

func (e *firstError) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// openUpload returns the multipart upload to use for f: the one recorded in
// State if it is still valid for this exact file content and part size (with
// the parts the server already holds), or a new one.
func (u *Uploader) openUpload(ctx context.Context, f File, stamp fileStamp, partSize int64) (Upload, map[int32]store.Part, error) {
	if st := u.opts.State; st != nil {
		if prev, ok := st.Get(f.Key); ok {
			// An upload begun while the file was written is kept whatever
			// the stamp: putMultipart checks every part's digest.
			if (prev.Stamp == stamp || prev.Early) && prev.PartSize == partSize {
				parts, err := u.opts.Store.ListParts(ctx, f.Key, prev.UploadID)
				if err == nil {
					held := make(map[int32]store.Part, len(parts))
					for _, p := range parts {
						held[p.Number] = p
					}
					u.opts.Logger.Info("resuming multipart upload", zap.String("file", f.RelPath), zap.Int("parts_held", len(parts)))
					return prev, held, nil
				}
				if !errors.Is(err, store.ErrNotExist) {
					return Upload{}, nil, fmt.Errorf("list parts of the upload being resumed: %w", err)
				}
				u.opts.Logger.Info("recorded multipart upload is gone; starting over", zap.String("file", f.RelPath))
			} else {
				// The file or part size changed since: the old parts are
				// useless. Abort them so they stop costing storage.
				if err := u.opts.Store.AbortMultipart(ctx, f.Key, prev.UploadID); err != nil && !errors.Is(err, store.ErrNotExist) {
					u.opts.Logger.Warn("could not abort a stale multipart upload", zap.String("key", f.Key), zap.Error(err))
				}
			}
		}
	}
	id, err := u.opts.Store.CreateMultipart(ctx, f.Key)
	if err != nil {
		return Upload{}, nil, fmt.Errorf("create multipart upload: %w", err)
	}
	up := Upload{UploadID: id, PartSize: partSize, Stamp: stamp}
	if u.opts.State != nil {
		if err := u.opts.State.Put(f.Key, up); err != nil {
			return Upload{}, nil, fmt.Errorf("record multipart upload: %w", err)
		}
	}
	return up, nil, nil
}
