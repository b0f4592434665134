package restore

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// putMultipart uploads data as a multipart object with equal parts of
// partSize, as the uploader does for large files.
func putMultipart(t *testing.T, st *s3store.Store, key string, data []byte, partSize int) {
	t.Helper()
	ctx := context.Background()
	id, err := st.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var parts []store.Part
	for n, off := int32(1), 0; off < len(data); n, off = n+1, off+partSize {
		b := data[off:min(off+partSize, len(data))]
		p, err := st.UploadPart(ctx, key, id, n, bytes.NewReader(b), int64(len(b)), store.CRC32C(b))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	if _, err := st.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatal(err)
	}
}

// Against a real S3 server (versitygw): ranged GETs across part
// boundaries, the one-byte-longer last range, 0-byte files, resume, and a
// corrupt object.
func TestRestoreFromS3(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	ctx := context.Background()
	const partSize = store.MinPartSize
	files := []tfile{
		{path: "empty", data: nil},
		{path: "one", data: []byte{1}},
		{path: "sub/chunk+1", data: randBytes(mib+1, 1)},
		{path: "model/rank0.pt", data: randBytes(2*partSize+3, 2), rank: rank(0)},
	}
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 1000, Created: time.Now().UTC(),
		Symlinks: []manifest.Symlink{{Path: "latest.pt", Target: "model/rank0.pt"}}}
	for _, f := range files {
		key := manifest.DataKey(testPrefix, 1000, "a1", f.path)
		entry := manifest.File{Path: f.path, Size: int64(len(f.data)), BLAKE3: b3(f.data), Key: key, Rank: f.rank}
		if len(f.data) > partSize {
			putMultipart(t, st, key, f.data, partSize)
			entry.PartSize = partSize
		} else {
			overwrite(t, st, key, f.data)
		}
		m.Files = append(m.Files, entry)
	}
	if _, _, err := remote.Commit(ctx, st, testPrefix, m); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	opts := Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib, Concurrency: 8}
	res, err := Restore(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	if res.Step != 1000 || res.Downloaded != len(files) || res.Symlinks != 1 {
		t.Errorf("result %+v", res)
	}
	assertNoTemps(t, dir)

	// Everything is in place: a second run fetches nothing.
	res, err = Restore(ctx, opts)
	if err != nil || res.Kept != len(files) || res.BytesDownloaded != 0 {
		t.Errorf("second run: %+v, %v", res, err)
	}

	// A corrupt object of the right size fails the restore, naming the file.
	bad := bytes.Clone(files[2].data)
	bad[mib] ^= 1
	overwrite(t, st, m.Files[2].Key, bad)
	dir2 := t.TempDir()
	opts.Dir = dir2
	_, err = Restore(ctx, opts)
	if !errors.Is(err, ErrHashMismatch) || !bytes.Contains([]byte(err.Error()), []byte("restore sub/chunk+1: BLAKE3 mismatch")) {
		t.Fatalf("got %v, want a BLAKE3 mismatch naming sub/chunk+1", err)
	}
	assertAbsent(t, filepath.Join(dir2, "sub/chunk+1"))
	assertNoTemps(t, dir2)
}

// TestRestoreShardedFromS3: a step committed as a sharded manifest on a real
// server restores every file, and a restore of one rank reads only the
// shards it needs and gets that rank's files and the shared ones.
func TestRestoreShardedFromS3(t *testing.T) {
	defer manifest.SetShardThresholds(1, 2)()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	var files []tfile
	for r := range 4 {
		files = append(files, tfile{path: filepath.Join("model", "rank"+string(rune('0'+r))+".pt"), data: randBytes(1000+r, uint64(r)), rank: rank(r)})
	}
	files = append(files, tfile{path: "config.json", data: []byte(`{"lr": 1}`)})
	m := commit(t, st, 7, files, nil)
	if !m.Sharded() || len(m.Shards) != 3 {
		t.Fatalf("committed %d shards, want 3", len(m.Shards))
	}
	dir := t.TempDir()
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	hooked := &hookStore{Store: st}
	one := t.TempDir()
	res, err := Restore(context.Background(), Options{Store: hooked, Prefix: testPrefix, Dir: one, Step: 7, Ranks: func(r *int) bool { return *r == 3 }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 {
		t.Fatalf("restored %d files for rank 3, want its file and the config", res.Files)
	}
	assertFile(t, filepath.Join(one, "model", "rank3.pt"), files[3].data)
	assertFile(t, filepath.Join(one, "config.json"), files[4].data)
	if n := len(hooked.gets(m.Shards[0].Key)); n != 0 {
		t.Errorf("the shard of ranks 0-1 was read %d times for rank 3", n)
	}
}
