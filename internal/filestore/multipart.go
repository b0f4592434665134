package filestore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ferrylabs/ferry/internal/store"
)

// An upload is the folder .ferry/uploads/<id>: its file "key" holds the
// object's key (its modification time is when the upload began, and it is
// the upload's lock), and each part is a file "<number>-<crc32c hex>".
const uploadKeyFile = "key"

func uploadDir(id string) string { return uploadsDir + "/" + id }

// checkUploadID refuses an ID that is not one CreateMultipart makes.
func checkUploadID(id string) error {
	if len(id) != 24 || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("upload %q: %w", id, store.ErrNotExist)
	}
	return nil
}

// CreateMultipart implements store.Store. The upload's folder is built
// under a temporary name and renamed into place whole.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	s.count("CreateMultipartUpload")
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("create multipart upload: %w", err)
	}
	f, name, err := s.createTemp()
	if err != nil {
		return "", fmt.Errorf("create multipart upload of %s: %w", key, err)
	}
	t, err := s.fillTemp(ctx, f, name, func(w *os.File) (uint32, error) {
		_, err := io.WriteString(w, key)
		return 0, err
	})
	if err != nil {
		return "", fmt.Errorf("create multipart upload of %s: %w", key, err)
	}
	id := randomName()
	staging := tmpDir + "/up-" + id
	err = s.root.Mkdir(staging, 0o755)
	if err == nil {
		err = s.root.Rename(t.name, staging+"/"+uploadKeyFile)
	}
	if err == nil {
		err = s.mkdirMeta(uploadsDir)
	}
	if err == nil {
		err = s.root.Rename(staging, uploadDir(id))
	}
	if err == nil {
		err = s.syncDir(uploadsDir)
	}
	if err != nil {
		s.root.Remove(t.name)
		s.root.RemoveAll(staging)
		return "", fmt.Errorf("create multipart upload of %s: %w", key, err)
	}
	return id, nil
}

// lockUpload takes the lock of upload id of key (shared or exclusive, as
// unix.LOCK_SH or LOCK_EX) and returns its release; ErrNotExist when the
// upload is unknown, of another key, or completed or aborted meanwhile.
func (s *Store) lockUpload(ctx context.Context, key, id string, how int) (func(), error) {
	if err := checkUploadID(id); err != nil {
		return nil, err
	}
	name := uploadDir(id) + "/" + uploadKeyFile
	// Read-write: NFS clients lock through POSIX locks, and an exclusive
	// one needs a descriptor open for writing.
	f, err := s.root.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, notExist(err, "upload "+id)
	}
	if err := s.flock(ctx, f, how); err != nil {
		f.Close()
		return nil, err
	}
	// The lock holder may have completed or aborted the upload, renaming
	// its folder away: the name must still lead to the locked file.
	fi, err := f.Stat()
	cur, serr := s.root.Stat(name)
	if err == nil && (serr != nil || !os.SameFile(fi, cur)) {
		err = fmt.Errorf("upload %s: %w", id, store.ErrNotExist)
	}
	var got []byte
	if err == nil {
		got, err = io.ReadAll(f)
	}
	if err == nil && string(got) != key {
		err = fmt.Errorf("upload %s is not one of %s: %w", id, key, store.ErrNotExist)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// partName is the file name of part n with the given CRC32C.
func partName(n int32, crc uint32) string { return fmt.Sprintf("%05d-%08x", n, crc) }

// partETag is a part's ETag: its CRC32C and size, which a name and a stat
// give back without reading the part.
func partETag(crc uint32, size int64) string { return fmt.Sprintf(`"%08x-%x"`, crc, size) }

// decodeCRC32C reads S3's base64 encoding of a CRC32C.
func decodeCRC32C(s string) (uint32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("CRC32C %q is not 4 bytes in base64", s)
	}
	return binary.BigEndian.Uint32(b), nil
}

// UploadPart implements store.Store: the part is written and checked as a
// Put's body, then renamed into the upload's folder under the upload's
// lock, replacing an earlier copy of the same part.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	s.count("UploadPart")
	what := fmt.Sprintf("upload part %d of %s", n, key)
	if n < 1 || n > store.MaxParts {
		return store.Part{}, fmt.Errorf("%s: part number outside 1..%d", what, store.MaxParts)
	}
	crc, err := decodeCRC32C(crc32c)
	if err != nil {
		return store.Part{}, fmt.Errorf("%s: %w", what, err)
	}
	unlock, err := s.lockUpload(ctx, key, uploadID, unix.LOCK_SH)
	if err != nil {
		return store.Part{}, fmt.Errorf("%s: %w", what, err)
	}
	unlock() // known before the body is copied; checked again at the rename
	t, err := s.writeTemp(ctx, body, size, crc32c)
	if err != nil {
		return store.Part{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.placePart(ctx, key, uploadID, n, crc, t); err != nil {
		s.root.Remove(t.name)
		return store.Part{}, fmt.Errorf("%s: %w", what, err)
	}
	return store.Part{Number: n, Size: size, ETag: partETag(crc, size), CRC32C: crc32c}, nil
}

// placePart renames a written part into its upload and removes the other
// copies of part n.
func (s *Store) placePart(ctx context.Context, key, id string, n int32, crc uint32, t temp) error {
	unlock, err := s.lockUpload(ctx, key, id, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	dir := uploadDir(id)
	held, err := s.parts(dir)
	if err != nil {
		return err
	}
	if err := s.root.Rename(t.name, dir+"/"+partName(n, crc)); err != nil {
		return fmt.Errorf("rename into the upload: %w", err)
	}
	for _, p := range held {
		if p.n == n && p.crc != crc {
			if err := s.root.Remove(dir + "/" + partName(n, p.crc)); err != nil {
				return fmt.Errorf("remove an earlier copy: %w", err)
			}
		}
	}
	return s.syncDir(dir)
}

// heldPart is a part file of an upload.
type heldPart struct {
	n    int32
	crc  uint32
	size int64
}

// parts reads the part files of the upload folder dir, in part order.
func (s *Store) parts(dir string) ([]heldPart, error) {
	f, err := s.root.Open(dir)
	if err != nil {
		return nil, notExist(err, "read upload "+dir)
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read upload %s: %w", dir, err)
	}
	var out []heldPart
	for _, de := range des {
		num, sum, ok := strings.Cut(de.Name(), "-")
		n, nerr := strconv.ParseInt(num, 10, 32)
		crc, cerr := strconv.ParseUint(sum, 16, 32)
		if !ok || nerr != nil || cerr != nil {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			return nil, fmt.Errorf("read upload %s: %w", dir, err)
		}
		out = append(out, heldPart{n: int32(n), crc: uint32(crc), size: fi.Size()})
	}
	slices.SortFunc(out, func(a, b heldPart) int { return int(a.n) - int(b.n) })
	return out, nil
}

// ListParts implements store.Store.
func (s *Store) ListParts(ctx context.Context, key, uploadID string) ([]store.Part, error) {
	s.count("ListParts")
	unlock, err := s.lockUpload(ctx, key, uploadID, unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("list parts of %s: %w", key, err)
	}
	defer unlock()
	held, err := s.parts(uploadDir(uploadID))
	if err != nil {
		return nil, fmt.Errorf("list parts of %s: %w", key, err)
	}
	parts := make([]store.Part, 0, len(held))
	for _, p := range held {
		parts = append(parts, store.Part{Number: p.n, Size: p.size, ETag: partETag(p.crc, p.size), CRC32C: store.EncodeCRC32C(p.crc)})
	}
	return parts, nil
}

// AbortMultipart implements store.Store.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	s.count("AbortMultipartUpload")
	unlock, err := s.lockUpload(ctx, key, uploadID, unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("abort upload of %s: %w", key, err)
	}
	err = s.retire(uploadID, unlock)
	if err != nil {
		return fmt.Errorf("abort upload of %s: %w", key, err)
	}
	return nil
}

// retire ends upload id, whose lock the caller holds: its folder is
// renamed away (from then on the upload is unknown), the lock released
// and the folder removed.
func (s *Store) retire(id string, unlock func()) error {
	gone := tmpDir + "/gone-" + id
	err := s.root.Rename(uploadDir(id), gone)
	if err == nil {
		err = s.syncDir(uploadsDir)
	}
	unlock()
	if err != nil {
		return fmt.Errorf("retire upload %s: %w", id, err)
	}
	if err := s.root.RemoveAll(gone); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove upload %s: %w", id, err)
	}
	return nil
}

// ListUploads implements store.Store.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	s.count("ListMultipartUploads")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := s.root.Open(uploadsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list uploads: %w", err)
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("list uploads: %w", err)
	}
	var ups []store.Upload
	for _, de := range des {
		name := uploadDir(de.Name()) + "/" + uploadKeyFile
		key, err := s.root.ReadFile(name)
		fi, serr := s.root.Stat(name)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(serr, fs.ErrNotExist) {
			continue // completed or aborted since the folder was read
		}
		if err = errors.Join(err, serr); err != nil {
			return nil, fmt.Errorf("list uploads: %w", err)
		}
		if strings.HasPrefix(string(key), prefix) {
			ups = append(ups, store.Upload{Key: string(key), UploadID: de.Name(), Initiated: fi.ModTime()})
		}
	}
	slices.SortFunc(ups, func(a, b store.Upload) int { return strings.Compare(a.Key+a.UploadID, b.Key+b.UploadID) })
	return ups, nil
}
