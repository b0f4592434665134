package uploader

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/pagecache"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Packing small files. Across the internet every request waits a round
// trip, and a step of thousands of small files is mostly round trips when
// each is an object: at 80 ms, 1,000 PUTs of 256 KiB cost more in waiting
// and per-request CPU (client, server and proxy) than in bytes. Files
// smaller than PackFileLimit are therefore packed, whole and one after the
// other, into objects of up to maxPackSize sent with one PUT each, and the
// manifest records each file's pack and offset (manifest format 3). A
// restore then fetches runs of neighbouring files with one ranged GET and
// checks every file against its own BLAKE3.
const (
	// PackFileLimit: files smaller than this are packed. At 80 ms and
	// 50 MB/s per connection a request's round trip costs as much time as
	// sending 4 MB.
	PackFileLimit = 4 << 20
	// maxPackSize bounds a pack: one PUT that is still short on one
	// connection, and a restore run that fits one ranged GET.
	maxPackSize = 16 << 20
	// minPackSize is the pack size below which packs are not cut smaller
	// to spread a step's small files over more requests.
	minPackSize = 1 << 20
	// packSpread is how many packs a step's small files are spread over
	// at least (when each still holds minPackSize), so that their PUTs
	// fill the link together rather than one after another.
	packSpread = 32
	// maxPackFiles bounds the files of one pack (and the manifest entries
	// one failed PUT sends again).
	maxPackFiles = 4096
)

// packMember is a file of a pack and what reading it found.
type packMember struct {
	i     int // index in the Upload call's files
	f     File
	stamp fileStamp
	// opened is the file the hashing read opened: later reads must find
	// that file again.
	opened confine.Stat
	sum    string // BLAKE3, once hashed
	off    int64  // offset in the pack, once placed
	// cache is which of its pages were cached before the pack read it
	// (Options.DropCache), for leaveCache once the pack is sent.
	cache *pagecache.Residency
}

// planPacks splits files into those sent as objects of their own (whole)
// and packs of small files: grouped by rank so that a restore of some
// ranks reads whole runs, in the order given within a rank, each pack at
// most the size that spreads the small bytes over packSpread packs (within
// minPackSize..maxPackSize). A file's size is the scan's (File.Seen) when
// known, else stat'ed; files that cannot be stat'ed go whole, where the
// upload reports the error.
func planPacks(files []File) (whole []int, packs [][]packMember) {
	var small []packMember
	var total int64
	for i, f := range files {
		st, err := seenOrStat(f)
		if err != nil || st.Size >= PackFileLimit {
			whole = append(whole, i)
			continue
		}
		small = append(small, packMember{i: i, f: f, stamp: st})
		total += st.Size
	}
	target := min(max(total/packSpread, minPackSize), maxPackSize)
	byRank := map[int][]packMember{}
	var ranks []int
	for _, m := range small {
		r := -1
		if m.f.Rank != nil {
			r = *m.f.Rank
		}
		if _, ok := byRank[r]; !ok {
			ranks = append(ranks, r)
		}
		byRank[r] = append(byRank[r], m)
	}
	for _, r := range ranks {
		var cur []packMember
		var size int64
		for _, m := range byRank[r] {
			if len(cur) > 0 && (size+m.stamp.Size > target || len(cur) == maxPackFiles) {
				packs, cur, size = append(packs, cur), nil, 0
			}
			cur, size = append(cur, m), size+m.stamp.Size
		}
		if len(cur) > 0 {
			packs = append(packs, cur)
		}
	}
	return whole, packs
}

// seenOrStat is the stamp of f as the scan saw it, or as it is now when
// the scan's is not known.
func seenOrStat(f File) (fileStamp, error) {
	if s := f.Seen; s != nil && !s.ModTime.IsZero() {
		return fileStamp{Size: s.Size, ModTime: s.ModTime.UnixNano()}, nil
	}
	return f.stat()
}

// uploadPack sends one pack and returns the manifest entries of its files,
// in its order. A file equal to its Reuse entry is referenced instead and
// left out of the pack. The pack's key is named after its content, so a
// retried push writes the same bytes to the same key.
func (u *Uploader) uploadPack(ctx context.Context, members []packMember) ([]manifest.File, error) {
	out := make([]manifest.File, len(members))
	var send []*packMember
	// The CRC32C of every member in order, from the hashing read: the
	// pack's when no member is deduplicated.
	var crc uint32
	onBlock := func(b []byte) { crc = crc32.Update(crc, castagnoli, b) }
	for k := range members {
		m := &members[k]
		ref, err := u.hashMember(ctx, m, onBlock)
		if err != nil {
			return nil, fmt.Errorf("upload %s: %w", m.f.RelPath, err)
		}
		if ref != nil {
			out[k] = *ref
			continue
		}
		send = append(send, m)
	}
	if len(send) == 0 {
		return out, nil
	}
	key, size := u.packKey(send)
	if len(send) < len(members) {
		var err error
		if crc, err = u.packCRC(ctx, send); err != nil {
			return nil, err
		}
	}
	if !u.packDone(ctx, key, size) {
		if err := u.putPack(ctx, key, size, crc, send); err != nil {
			return nil, err
		}
		if st := u.opts.state; st != nil {
			st.Note(key, doneObject{Stamp: fileStamp{Size: size}})
		}
	}
	k := 0
	for j := range members {
		if out[j].Path != "" {
			continue
		}
		m := send[k]
		k++
		out[j] = manifest.File{Path: m.f.RelPath, Size: m.stamp.Size, BLAKE3: m.sum, Key: key, Rank: m.f.Rank, PackSize: size, Offset: m.off,
			MTime: m.stamp.mtime()}
	}
	u.stats.objects.Add(1)
	return out, nil
}

// packDone reports whether the resume state records the pack key as
// written whole, with size bytes, and the object is still there with its
// size: a push retried after its manifest was refused (or killed after
// the pack was sent) reads the pack's files again to name it, and sends
// none of their bytes. The key is named after the members' paths, sizes
// and BLAKE3s, so a record of it is a record of the same content.
func (u *Uploader) packDone(ctx context.Context, key string, size int64) bool {
	if u.opts.state == nil {
		return false
	}
	done, ok := u.opts.state.GetDone(key)
	if !ok || done.Stamp.Size != size {
		return false
	}
	info, err := u.opts.Store.Head(ctx, key)
	if err != nil || info.Size != size {
		return false
	}
	u.durable(size)
	u.opts.Logger.Debug("pack already uploaded by an earlier attempt", zap.String("key", key))
	return true
}

// hashMember hashes one file of a pack, handing each block read to onBlock
// too (the pack's CRC32C), and returns its entry when it is unchanged
// since the earlier step it may reuse (nil: it is to be sent).
func (u *Uploader) hashMember(ctx context.Context, m *packMember, onBlock func([]byte)) (*manifest.File, error) {
	fh, stamp, opened, err := m.f.open()
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer fh.Close()
	m.opened = opened
	if stamp != m.stamp {
		return nil, changed(m.stamp, stamp)
	}
	if u.opts.DropCache {
		// The pack reads the file again; its pages go once it is sent.
		m.cache, _ = pagecache.Snapshot(fh, stamp.Size)
	}
	h := blake3.New()
	if err := u.hashRange(ctx, fh, 0, stamp.Size, h, onBlock); err != nil {
		return nil, err
	}
	m.sum = hex.EncodeToString(h.Sum(nil))
	r := m.f.Reuse
	if r == nil || r.Size != stamp.Size || r.BLAKE3 != m.sum {
		return nil, nil
	}
	ref := *r
	ref.Path, ref.Rank, ref.MTime = m.f.RelPath, m.f.Rank, stamp.mtime()
	u.deduplicated(m.f, stamp.Size)
	return &ref, nil
}

// packKey places the files to send one after the other and returns the
// pack's key (named by the files' paths and hashes) and size.
func (u *Uploader) packKey(send []*packMember) (string, int64) {
	name := blake3.New()
	var size int64
	for _, m := range send {
		m.off = size
		size += m.stamp.Size
		fmt.Fprintf(name, "%s\x00%d\x00%s\n", m.f.RelPath, m.stamp.Size, m.sum)
	}
	return u.opts.PackKey(hex.EncodeToString(name.Sum(nil)[:12])), size
}

// packCRC reads the files to send again for the pack's CRC32C: needed
// once a deduplicated file left the pack, as the CRC32C of the hashing
// read then covers bytes the pack does not hold. The server checks the
// CRC32C against the bytes sent, so a file changed after its BLAKE3 was
// taken fails the PUT instead of being committed with the wrong hash.
func (u *Uploader) packCRC(ctx context.Context, send []*packMember) (uint32, error) {
	var crc uint32
	for _, m := range send {
		fh, err := m.f.reopen(m.opened)
		if err != nil {
			return 0, fmt.Errorf("upload %s: open: %w", m.f.RelPath, err)
		}
		err = u.hashRange(ctx, fh, 0, m.stamp.Size, io.Discard, func(b []byte) { crc = crc32.Update(crc, castagnoli, b) })
		fh.Close()
		if err != nil {
			return 0, fmt.Errorf("upload %s: %w", m.f.RelPath, err)
		}
	}
	return crc, nil
}

// putPack sends the pack with one PUT whose body reads the files in turn,
// and checks that none changed meanwhile.
func (u *Uploader) putPack(ctx context.Context, key string, size int64, crc uint32, send []*packMember) error {
	if err := u.acquire(ctx, size); err != nil {
		return err
	}
	body := &packBody{members: send, size: size}
	defer body.close()
	err := u.sendHeld(ctx, size, func() error {
		_, err := u.opts.Store.Put(ctx, key, body, size, store.PutOptions{CRC32C: store.EncodeCRC32C(crc)})
		return err
	})
	for _, m := range send {
		if cerr := checkUnchanged(m.f, m.stamp); cerr != nil {
			return fmt.Errorf("upload %s: %w", m.f.RelPath, cerr)
		}
	}
	u.leavePackCache(send)
	if err != nil {
		return fmt.Errorf("upload pack of %d files (%s first): put object: %w", len(send), send[0].f.RelPath, err)
	}
	u.opts.Logger.Debug("sent pack", zap.String("key", key), zap.Int("files", len(send)), zap.Int64("bytes", size))
	return nil
}

// leavePackCache drops the pages of the pack's files that were not cached
// before it read them (Options.DropCache), as uploadFile does for a file.
func (u *Uploader) leavePackCache(send []*packMember) {
	for _, m := range send {
		if m.cache == nil {
			continue
		}
		if fh, err := m.f.reopen(m.opened); err == nil {
			if err := m.cache.DropOthers(fh); err != nil {
				u.opts.Logger.Debug("page cache: could not drop pages", zap.Error(err))
			}
			fh.Close()
		}
	}
}

// packBody reads a pack's files one after the other, opening each when
// the read reaches it, so a pack of thousands of files holds one open file.
// It seeks, for the SDK's retries.
type packBody struct {
	members []*packMember
	size    int64
	pos     int64
	cur     int // index of the open member; open is nil when none
	open    *os.File
}

func (b *packBody) Read(p []byte) (int, error) {
	if b.pos >= b.size {
		return 0, io.EOF
	}
	m, err := b.member()
	if err != nil {
		return 0, err
	}
	n, err := b.open.ReadAt(p[:min(int64(len(p)), m.off+m.stamp.Size-b.pos)], b.pos-m.off)
	b.pos += int64(n)
	if n > 0 || len(p) == 0 {
		return n, nil
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("%s: %w: file shrank while being read", m.f.RelPath, ErrFileChanged)
	}
	return 0, err
}

// member returns the member holding b.pos (< b.size), opened. Members are
// contiguous, so one with bytes holds it; empty ones are passed over.
func (b *packBody) member() (*packMember, error) {
	m := b.members[b.cur]
	for m.off+m.stamp.Size <= b.pos {
		b.close()
		b.cur++
		m = b.members[b.cur]
	}
	if b.open == nil {
		fh, err := m.f.reopen(m.opened)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.f.RelPath, err)
		}
		b.open = fh
	}
	return m, nil
}

func (b *packBody) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += b.pos
	case io.SeekEnd:
		offset += b.size
	default:
		return 0, fmt.Errorf("pack body: whence %d", whence)
	}
	if offset < 0 || offset > b.size {
		return 0, fmt.Errorf("pack body: seek to %d of %d", offset, b.size)
	}
	b.close()
	b.pos, b.cur = offset, 0
	return offset, nil
}

func (b *packBody) close() {
	if b.open != nil {
		b.open.Close()
		b.open = nil
	}
}
