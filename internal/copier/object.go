package copier

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// run sends objs, Concurrency requests at a time across them. The first
// failure cancels the rest.
func (c *copier) run(ctx context.Context, objs []*object) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.o.Concurrency)
	for _, ob := range objs {
		g.Go(func() error {
			if ob.part == 0 {
				return c.copySingle(gctx, ob)
			}
			return c.copyMultipart(gctx, ob)
		})
	}
	return g.Wait()
}

// acquire takes a request slot and the memory budget a buffer of n bytes
// takes.
func (c *copier) acquire(ctx context.Context, n int64) (release func(), err error) {
	n = min(classSize(n), max(c.o.Memory, c.o.PartSize))
	if err := c.mem.Acquire(ctx, n); err != nil {
		return nil, err
	}
	if err := c.slots.Acquire(ctx, 1); err != nil {
		c.mem.Release(n)
		return nil, err
	}
	return func() { c.slots.Release(1); c.mem.Release(n) }, nil
}

// copySingle copies an object of at most one part, or a pack, with one
// GET and one PUT, after checking its bytes against the manifest.
func (c *copier) copySingle(ctx context.Context, ob *object) error {
	release, err := c.acquire(ctx, ob.size)
	if err != nil {
		return err
	}
	defer release()
	buf := buffers.get(ob.size)
	defer buffers.put(buf)
	if err := c.read(ctx, ob, 0, buf); err != nil {
		return err
	}
	if err := c.verify(ob, buf); err != nil {
		return err
	}
	_, err = c.o.To.Put(ctx, ob.key, bytes.NewReader(buf), ob.size, store.PutOptions{CRC32C: store.CRC32C(buf)})
	if err != nil {
		return fmt.Errorf("write %s at the destination: %w", ob.key, err)
	}
	c.add(func(r *StepResult) { r.Sent++; r.BytesSent += ob.size })
	return nil
}

// verify checks buf, all of ob's bytes, against the manifest: the file's
// BLAKE3, or each member's over its range of a pack.
func (c *copier) verify(ob *object, buf []byte) error {
	if ob.members != nil {
		return c.verifyMembers(ob, buf)
	}
	sum := blake3.Sum256(buf)
	if got := hex.EncodeToString(sum[:]); got != ob.src.BLAKE3 {
		return c.corrupt(ob, "its bytes hash to "+got)
	}
	return nil
}

// copyMultipart copies an object part by part, each part's bytes hashed
// as a BLAKE3 subtree on the way, and completes the upload only when the
// whole object hashes to the manifest's BLAKE3; otherwise it aborts it.
func (c *copier) copyMultipart(ctx context.Context, ob *object) error {
	uploadID, held, err := c.openUpload(ctx, ob)
	if err != nil {
		return err
	}
	n := int((ob.size + ob.part - 1) / ob.part)
	nodes, parts := make([]blake3tree.Node, n), make([]store.Part, n)
	g, gctx := errgroup.WithContext(ctx)
	for i := range n {
		size := min(ob.part, ob.size-int64(i)*ob.part)
		release, err := c.acquire(gctx, size)
		if err != nil {
			break // gctx ended: Wait returns why
		}
		g.Go(func() error {
			defer release()
			var err error
			parts[i], nodes[i], err = c.copyPart(gctx, ob, uploadID, i, size, held)
			return err
		})
	}
	err = g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = c.checkSum(ob, nodes)
	}
	if errors.Is(err, ErrSourceCorrupt) {
		if aerr := c.o.To.AbortMultipart(ctx, ob.key, uploadID); aerr != nil && !errors.Is(aerr, store.ErrNotExist) {
			c.log.Warn("cannot abort the upload of a corrupt source object", zap.String("key", ob.key), zap.Error(aerr))
		}
	}
	if err != nil {
		return err
	}
	if _, err := c.o.To.CompleteMultipart(ctx, ob.key, uploadID, parts); err != nil {
		return fmt.Errorf("complete %s at the destination: %w", ob.key, err)
	}
	c.add(func(r *StepResult) { r.Sent++ })
	return nil
}

// openUpload continues the unfinished upload an earlier run left, with
// the parts it holds, or starts a new one.
func (c *copier) openUpload(ctx context.Context, ob *object) (string, map[int32]store.Part, error) {
	if ob.upload != nil {
		parts, err := c.o.To.ListParts(ctx, ob.key, ob.upload.UploadID)
		if err == nil {
			held := make(map[int32]store.Part, len(parts))
			for _, p := range parts {
				held[p.Number] = p
			}
			c.log.Debug("continuing an unfinished upload", zap.String("key", ob.key), zap.Int("parts", len(parts)))
			return ob.upload.UploadID, held, nil
		}
		if !errors.Is(err, store.ErrNotExist) {
			return "", nil, fmt.Errorf("list the parts of the unfinished upload of %s: %w", ob.key, err)
		}
	}
	id, err := c.o.To.CreateMultipart(ctx, ob.key)
	if err != nil {
		return "", nil, fmt.Errorf("start the upload of %s at the destination: %w", ob.key, err)
	}
	return id, nil, nil
}

// copyPart reads part i (size bytes) from the source, hashes it, and sends
// it unless the destination holds that part with the same size and CRC32C.
func (c *copier) copyPart(ctx context.Context, ob *object, uploadID string, i int, size int64, held map[int32]store.Part) (store.Part, blake3tree.Node, error) {
	off := int64(i) * ob.part
	buf := buffers.get(size)
	defer buffers.put(buf)
	if err := c.read(ctx, ob, off, buf); err != nil {
		return store.Part{}, blake3tree.Node{}, err
	}
	h, err := blake3tree.NewRange(off)
	if err != nil {
		return store.Part{}, blake3tree.Node{}, err
	}
	_, _ = h.Write(buf)
	crc, num := store.CRC32C(buf), int32(i+1)
	if p, ok := held[num]; ok && p.Size == size && p.CRC32C == crc {
		c.add(func(r *StepResult) { r.PartsKept++ })
		return p, h.Node(), nil
	}
	p, err := c.o.To.UploadPart(ctx, ob.key, uploadID, num, bytes.NewReader(buf), size, crc)
	if err != nil {
		return store.Part{}, blake3tree.Node{}, fmt.Errorf("send part %d of %s: %w", num, ob.key, err)
	}
	c.add(func(r *StepResult) { r.BytesSent += size })
	return p, h.Node(), nil
}

// read fills buf with the source object's bytes from off. An object that
// ends early is ErrSourceCorrupt when a HEAD confirms it is shorter than
// the manifest says; otherwise the read failed on the way. A pack is read
// whole with one byte more asked for: a longer pack is corrupt too.
func (c *copier) read(ctx context.Context, ob *object, off int64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	want := int64(len(buf))
	if ob.members != nil {
		want++
	}
	body, err := c.o.From.Get(ctx, ob.src.Key, off, want)
	if errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket) {
		return c.corrupt(ob, "it is missing")
	}
	if err != nil {
		return fmt.Errorf("read %s at the source: %w", ob.src.Key, err)
	}
	defer body.Close()
	got, err := io.ReadFull(body, buf)
	if err == nil && ob.members != nil {
		if more, _ := io.ReadFull(body, make([]byte, 1)); more > 0 {
			return c.corrupt(ob, "it is longer")
		}
	}
	if err == nil {
		return nil
	}
	if info, herr := c.o.From.Head(ctx, ob.src.Key); herr == nil && info.Size != ob.size {
		return c.corrupt(ob, fmt.Sprintf("it is %d bytes", info.Size))
	}
	return fmt.Errorf("read %s at the source (bytes %d-%d, got %d): %w", ob.src.Key, off, off+int64(len(buf)), got, err)
}

// checkSum compares the object's hash, assembled from its parts' subtrees,
// with the manifest's.
func (c *copier) checkSum(ob *object, nodes []blake3tree.Node) error {
	sum, err := blake3tree.Sum(nodes)
	if err != nil {
		return fmt.Errorf("hash %s: %w", ob.src.Key, err)
	}
	if sum != ob.src.BLAKE3 {
		return c.corrupt(ob, "its bytes hash to "+sum)
	}
	return nil
}

// corrupt is the error for a source object that does not match its
// manifest entry (a pack: the entries of its files).
func (c *copier) corrupt(ob *object, what string) error {
	if ob.members != nil {
		return fmt.Errorf("%w: %s (pack of %d files, file %s among them): %s, the manifest says %d bytes; %s",
			ErrSourceCorrupt, ob.src.Key, len(ob.members), ob.src.Path, what, ob.size, nothingCommitted)
	}
	return c.corruptFile(ob, ob.src, what)
}

// corruptFile is the error for file f of object ob (itself, or a member
// of the pack ob) whose bytes do not match its manifest entry.
func (c *copier) corruptFile(ob *object, f manifest.File, what string) error {
	return fmt.Errorf("%w: %s (file %s): %s, the manifest says %d bytes with BLAKE3 %s; %s",
		ErrSourceCorrupt, ob.src.Key, f.Path, what, f.Size, f.BLAKE3, nothingCommitted)
}

const nothingCommitted = "nothing of this step is committed at the destination (check the source with `ferry verify --read-data`)"
