package filestore

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ferrylabs/ferry/internal/store"
)

// CompleteMultipart implements store.Store. It holds the upload's lock
// throughout: the parts are checked against what the caller names and
// against R2's size rules (as the in-memory store does, so that what
// passes here passes on R2), concatenated into a temporary file, which is
// fsynced and renamed to key, and only then is the upload retired.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) (store.ObjectInfo, error) {
	s.count("CompleteMultipartUpload")
	if err := checkKey(key); err != nil {
		return store.ObjectInfo{}, fmt.Errorf("complete: %w", err)
	}
	unlock, err := s.lockUpload(ctx, key, uploadID, unix.LOCK_EX)
	if err != nil {
		return store.ObjectInfo{}, fmt.Errorf("complete %s: %w", key, err)
	}
	t, err := s.assemble(ctx, uploadID, parts)
	if err == nil {
		err = s.replace(ctx, t, key, "")
	}
	if err != nil {
		unlock()
		return store.ObjectInfo{}, fmt.Errorf("complete %s: %w", key, err)
	}
	if err := s.retire(uploadID, unlock); err != nil {
		return store.ObjectInfo{}, fmt.Errorf("complete %s: %w", key, err)
	}
	return objectInfo(key, t.info), nil
}

// checkParts checks the parts a completion names against those held, and
// returns the names of their files in order.
func checkParts(held []heldPart, parts []store.Part) ([]string, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("no parts")
	}
	byNum := map[int32]heldPart{}
	for _, h := range held {
		byNum[h.n] = h
	}
	names := make([]string, 0, len(parts))
	var first int64
	for i, p := range parts {
		h, ok := byNum[p.Number]
		if !ok || partETag(h.crc, h.size) != p.ETag || (p.CRC32C != "" && p.CRC32C != store.EncodeCRC32C(h.crc)) {
			return nil, fmt.Errorf("part %d does not match the uploaded part", p.Number)
		}
		if i > 0 && p.Number <= parts[i-1].Number {
			return nil, fmt.Errorf("parts not in ascending order")
		}
		last := i == len(parts)-1
		switch {
		case i == 0:
			first = h.size
		case !last && h.size != first:
			return nil, fmt.Errorf("all non-trailing parts must have the same length")
		case last && h.size > first:
			return nil, fmt.Errorf("final part larger than the others")
		}
		if !last && h.size < store.MinPartSize {
			return nil, fmt.Errorf("part %d smaller than %d bytes", p.Number, store.MinPartSize)
		}
		names = append(names, partName(h.n, h.crc))
	}
	return names, nil
}

// assemble concatenates the parts of upload id into a durable temporary
// file. io.Copy between two files uses copy_file_range, so the bytes need
// not pass through this process (and stay on the server on NFS 4.2).
func (s *Store) assemble(ctx context.Context, id string, parts []store.Part) (temp, error) {
	dir := uploadDir(id)
	held, err := s.parts(dir)
	if err != nil {
		return temp{}, err
	}
	names, err := checkParts(held, parts)
	if err != nil {
		return temp{}, err
	}
	f, name, err := s.createTemp()
	if err != nil {
		return temp{}, err
	}
	t, err := s.fillTemp(ctx, f, name, func(w *os.File) (uint32, error) {
		for _, n := range names {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			if err := s.appendFile(w, dir+"/"+n); err != nil {
				return 0, err
			}
		}
		return 0, nil
	})
	return t.temp, err
}

// appendFile copies the file name to the end of w.
func (s *Store) appendFile(w *os.File, name string) error {
	r, err := s.root.Open(name)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("append %s: %w", name, err)
	}
	return nil
}
