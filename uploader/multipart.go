package uploader

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/zeebo/blake3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// putMultipart hashes the file part by part and uploads each part as soon as
// its CRC32C is known, resuming an upload recorded in the resume state if
// there is one. pre, when set, holds the hashes from an earlier read, which
// is not repeated.
func (u *Uploader) putMultipart(ctx context.Context, fh *os.File, f File, stamp fileStamp, partSize int64, pre *digest) (string, error) {
	up, held, recorded, err := u.openUpload(ctx, f, stamp, partSize)
	if err != nil {
		return "", err
	}
	nparts := int32((stamp.Size + partSize - 1) / partSize)
	m := &fileParts{fh: fh, f: f, stamp: stamp, partSize: partSize, pre: pre, up: up, held: held,
		ph: newPartHashes(up.Early, nparts), parts: make([]store.Part, nparts)}
	if err := u.sendParts(ctx, m); err != nil {
		if recorded && errors.Is(err, store.ErrNotExist) {
			return "", u.refusedRecord(f, err)
		}
		return "", err
	}
	if err := checkUnchanged(f, stamp); err != nil {
		return "", err
	}
	if _, err := u.opts.Store.CompleteMultipart(ctx, f.Key, up.UploadID, m.parts); err != nil {
		if recorded && ctx.Err() == nil {
			return "", u.refusedRecord(f, err)
		}
		return "", fmt.Errorf("complete multipart upload: %w", err)
	}
	if pre != nil {
		return pre.blake3, nil
	}
	return m.ph.sum()
}

// fileParts is one file's multipart upload under way: what putMultipart
// hashes and sends, and the parts as the server answers them.
type fileParts struct {
	fh       *os.File
	f        File
	stamp    fileStamp
	partSize int64
	pre      *digest // hashes from an earlier read, or nil
	up       pendingUpload
	held     map[int32]store.Part // parts the server already holds
	ph       *partHashes
	parts    []store.Part // by index; complete once sendParts returns nil
}

// sendParts hashes and sends the parts of m that the server lacks. The
// hashing pass and the file's part requests run in one errgroup of their
// own: the first of them to fail cancels the others at once, and its
// error is the one returned. The uploader's request slots still bound
// what is in flight across every file.
func (u *Uploader) sendParts(ctx context.Context, m *fileParts) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return u.hashParts(gctx, g, m) })
	return g.Wait()
}

// hashParts reads the parts of m in partOrder, keeps those the server
// already holds with the same bytes and starts a request on g for each
// other one.
func (u *Uploader) hashParts(ctx context.Context, g *errgroup.Group, m *fileParts) error {
	for _, i := range partOrder(int32(len(m.parts)), m.held, m.up.Early) {
		off := int64(i) * m.partSize
		size := min(m.partSize, m.stamp.Size-off)
		var crc uint32
		var digest string
		if m.pre != nil {
			crc = m.pre.crcs[i]
		} else {
			var err error
			if crc, digest, err = m.ph.hash(ctx, u, m.fh, i, off, size); err != nil {
				return err
			}
		}
		sum := store.EncodeCRC32C(crc)
		if p, ok := m.held[i+1]; ok && p.Size == size && p.CRC32C == sum && (!m.up.Early || m.up.Digests[i+1] == digest) {
			m.parts[i] = p
			u.stats.resumed.Add(1)
			u.durable(size)
			continue
		}
		if _, sentEarly := m.up.Digests[i+1]; sentEarly {
			u.stats.resent.Add(1) // rewritten since it was sent early
		}
		// The hasher takes the slot and hands it to the request, so it never
		// runs more than one part ahead of the sends.
		if err := u.acquire(ctx, size); err != nil {
			return err
		}
		g.Go(func() error {
			p, err := u.sendPart(ctx, m.fh, m.f, m.up.UploadID, i+1, off, size, sum)
			if err != nil {
				return u.explain(m.f, m.stamp, fmt.Errorf("upload part %d: %w", i+1, err))
			}
			m.parts[i] = p
			return nil
		})
	}
	return nil
}

// partOrder is the order putMultipart reads the parts in: file order,
// except for an upload begun while the file was written, whose parts
// hash independently: there the parts the server lacks (the tail the
// trainer wrote last) go first, and checking the digests of those sent
// early overlaps with their sending.
func partOrder(nparts int32, held map[int32]store.Part, early bool) []int32 {
	order := make([]int32, 0, nparts)
	for i := range nparts {
		if _, ok := held[i+1]; !early || !ok {
			order = append(order, i)
		}
	}
	if !early {
		return order
	}
	for i := range nparts {
		if _, ok := held[i+1]; ok {
			order = append(order, i)
		}
	}
	return order
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
	if ph.whole != nil {
		err = u.hashRange(ctx, fh, off, size, ph.whole, func(b []byte) { crc = crc32.Update(crc, castagnoli, b) })
		return crc, "", err
	}
	crc, ph.nodes[i], err = u.hashSubtree(ctx, fh, ph.rng, off, size)
	if err != nil {
		return 0, "", err
	}
	return crc, ph.nodes[i].Digest(), nil
}

// hashSubtree reads [off, off+size) of fh once and returns its CRC32C and
// its BLAKE3 subtree node, hashed with h.
func (u *Uploader) hashSubtree(ctx context.Context, fh *os.File, h *blake3tree.Range, off, size int64) (uint32, blake3tree.Node, error) {
	if err := h.Reset(off); err != nil {
		return 0, blake3tree.Node{}, err
	}
	var crc uint32
	if err := u.hashRange(ctx, fh, off, size, h, func(b []byte) { crc = crc32.Update(crc, castagnoli, b) }); err != nil {
		return 0, blake3tree.Node{}, err
	}
	return crc, h.Node(), nil
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
		p, err := u.opts.Store.UploadPart(ctx, f.Key, uploadID, n, io.NewSectionReader(fh, off, size), size, sum)
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

// errRecordedParts is a completion refused with the parts recorded when
// they were sent early: uploadFile tries once more, listing them.
var errRecordedParts = errors.New("complete multipart upload with the parts recorded when they were sent")

// refusedRecord handles the server's refusal of an upload resumed from the
// parts recorded as sent early (the upload was aborted meanwhile, or a
// part is not the one recorded): the record goes, and the next try lists
// the parts, or finds the upload gone and starts over.
func (u *Uploader) refusedRecord(f File, err error) error {
	if ferr := u.opts.state.ForgetSent(f.Key); ferr != nil {
		return fmt.Errorf("complete multipart upload: %w (and %w)", err, ferr)
	}
	return fmt.Errorf("%w: %w", errRecordedParts, err)
}

// openUpload returns the multipart upload to use for f: the one recorded in
// the resume state if it is still valid for this exact file content and part
// size (with the parts the server already holds), or a new one. For an
// upload begun while the file was written whose every part's answer is
// recorded, the parts come from the record (recorded is true) instead of a
// listing.
func (u *Uploader) openUpload(ctx context.Context, f File, stamp fileStamp, partSize int64) (up pendingUpload, held map[int32]store.Part, recorded bool, err error) {
	if st := u.opts.state; st != nil {
		if prev, ok := st.Get(f.Key); ok {
			// An upload begun while the file was written is kept whatever
			// the stamp: putMultipart checks every part's digest.
			if (prev.Stamp == stamp || prev.Early) && prev.PartSize == partSize {
				if held, ok := recordedParts(prev); ok {
					u.opts.Logger.Info("resuming multipart upload", zap.String("file", f.RelPath), zap.Int("parts_held", len(held)))
					return prev, held, true, nil
				}
				parts, err := u.opts.Store.ListParts(ctx, f.Key, prev.UploadID)
				if err == nil {
					held := make(map[int32]store.Part, len(parts))
					for _, p := range parts {
						held[p.Number] = p
					}
					u.opts.Logger.Info("resuming multipart upload", zap.String("file", f.RelPath), zap.Int("parts_held", len(parts)))
					return prev, held, false, nil
				}
				if !errors.Is(err, store.ErrNotExist) {
					return pendingUpload{}, nil, false, fmt.Errorf("list parts of the upload being resumed: %w", err)
				}
				u.opts.Logger.Info("recorded multipart upload is gone; starting over", zap.String("file", f.RelPath))
			} else {
				// The file or part size changed since: the old parts are
				// useless. Abort them so they stop costing storage.
				abortUnused(ctx, u.opts.Store, f.Key, prev.UploadID, u.opts.Logger)
			}
		}
	}
	id, err := u.opts.Store.CreateMultipart(ctx, f.Key)
	if err != nil {
		return pendingUpload{}, nil, false, fmt.Errorf("create multipart upload: %w", err)
	}
	up = pendingUpload{UploadID: id, PartSize: partSize, Stamp: stamp}
	if u.opts.state != nil {
		if err := u.opts.state.Put(f.Key, up); err != nil {
			return pendingUpload{}, nil, false, fmt.Errorf("record multipart upload: %w", err)
		}
	}
	return up, nil, false, nil
}

// recordedParts returns the parts of an early upload from the server's
// answers recorded as each was sent, when every part sent is recorded so.
func recordedParts(up pendingUpload) (map[int32]store.Part, bool) {
	if !up.Early || len(up.Sent) == 0 || len(up.Sent) != len(up.Digests) {
		return nil, false
	}
	held := make(map[int32]store.Part, len(up.Sent))
	for n, p := range up.Sent {
		if _, ok := up.Digests[n]; !ok || p.ETag == "" {
			return nil, false
		}
		held[n] = store.Part{Number: n, Size: up.PartSize, ETag: p.ETag, CRC32C: p.CRC32C}
	}
	return held, true
}
