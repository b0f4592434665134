package uploader

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// TestPackBodyReadsAndSeeks: the body of a pack is its files one after
// the other, empty ones included, read in any piece size, from the start
// again after a seek (the SDK's retry), and fails when a file shrank.
func TestPackBodyReadsAndSeeks(t *testing.T) {
	dir := t.TempDir()
	var want []byte
	var members []*packMember
	for i, size := range []int64{0, 5, 0, 70000, 1, 0, 3} {
		path := filepath.Join(dir, fmt.Sprint(i))
		data := writeRandom(t, path, size, int64(i+1))
		f := File{LocalPath: path, RelPath: fmt.Sprint(i)}
		fh, _, opened, err := f.open()
		if err != nil {
			t.Fatal(err)
		}
		fh.Close()
		members = append(members, &packMember{f: f, stamp: stampOf(opened), opened: opened, off: int64(len(want))})
		want = append(want, data...)
	}
	b := &packBody{members: members, size: int64(len(want))}
	for _, piece := range []int{1, 7, 4096, 1 << 20} {
		if _, err := b.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var got []byte
		buf := make([]byte, piece)
		for {
			n, err := b.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("piece %d: %v", piece, err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("piece %d: body differs from the files (%d bytes, want %d)", piece, len(got), len(want))
		}
	}
	b.close()
	if err := os.Truncate(members[3].f.LocalPath, 100); err != nil {
		t.Fatal(err)
	}
	b.Seek(0, io.SeekStart)
	_, err := io.ReadAll(b)
	if !errors.Is(err, ErrFileChanged) {
		t.Fatalf("a file that shrank: got %v, want ErrFileChanged", err)
	}
	b.close()
}

// TestPlanPacks: small files are packed by rank in the order given, the
// step's small bytes spread over packSpread packs of at least minPackSize;
// large files go whole.
func TestPlanPacks(t *testing.T) {
	dir := t.TempDir()
	var files []File
	for i := range 200 {
		path := filepath.Join(dir, fmt.Sprint(i))
		size := int64(512 << 10)
		if i%50 == 0 {
			size = PackFileLimit // not small
		}
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		r := i % 2
		files = append(files, File{LocalPath: path, RelPath: fmt.Sprint(i), Rank: &r})
	}
	whole, packs := planPacks(files)
	if len(whole) != 4 {
		t.Fatalf("%d files whole, want the 4 of PackFileLimit bytes", len(whole))
	}
	// 196 x 512 KiB = 98 MiB over 32 packs: about 3 MiB each, 6 files.
	total := 0
	for _, p := range packs {
		var size int64
		for k, m := range p {
			size += m.stamp.Size
			if *m.f.Rank != *p[0].f.Rank || k > 0 && m.i <= p[k-1].i {
				t.Fatalf("pack mixes ranks or reorders files: %v", p)
			}
		}
		if size > 98<<20/packSpread+512<<10 {
			t.Errorf("pack of %d bytes", size)
		}
		total += len(p)
	}
	if total != 196 || len(packs) < packSpread || len(packs) > packSpread+2 {
		t.Errorf("%d files in %d packs, want 196 in about %d", total, len(packs), packSpread)
	}
}

// TestPushPacksDedupPerFile: a second step references the first step's
// pack for each unchanged small file and packs only the changed ones.
func TestPushPacksDedupPerFile(t *testing.T) {
	st := store.NewMemStore()
	dir := t.TempDir()
	want := map[string][]byte{}
	for i := range 20 {
		name := fmt.Sprintf("rank0/s%02d", i)
		want[name] = writeRandom(t, filepath.Join(dir, name), 1000+int64(i), int64(i+1))
	}
	first, err := push(t, st, dir, 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want["rank0/s03"] = writeRandom(t, filepath.Join(dir, "rank0/s03"), 1003, 99)
	second, err := push(t, st, dir, 2, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]manifest.File{}
	for _, f := range first.Manifest.Files {
		old[f.Path] = f
	}
	for _, f := range second.Manifest.Files {
		o := old[f.Path]
		switch {
		case !f.Packed():
			t.Errorf("%s not packed", f.Path)
		case f.Path == "rank0/s03" && (f.Key == o.Key || f.Offset != 0 || f.PackSize != 1003):
			t.Errorf("changed file %+v: want a pack of its own", f)
		case f.Path != "rank0/s03" && (f.Key != o.Key || f.Offset != o.Offset || f.PackSize != o.PackSize):
			t.Errorf("unchanged file %+v: want step 1's entry %+v", f, o)
		}
		obj := readObject(t, st, f.Key)
		if !bytes.Equal(obj[f.Offset:f.Offset+f.Size], want[f.Path]) {
			t.Errorf("%s: bytes in its pack differ", f.Path)
		}
	}
	if s := second.Stats; s.DedupFiles != 19 || s.Objects != 1 {
		t.Errorf("second push: %d files deduplicated, %d objects; want 19 and 1", s.DedupFiles, s.Objects)
	}
}

// TestPushRecordsMTimes: every file's entry carries the modification time
// it was hashed under, to the nanosecond, whether it is packed, sent with
// one PUT or in parts; and a file deduplicated against the previous step
// (same bytes, touched since) carries its own time, not the earlier
// step's.
func TestPushRecordsMTimes(t *testing.T) {
	st := store.NewMemStore()
	dir := t.TempDir()
	sizes := map[string]int64{"rank0/small-a": 1000, "rank0/small-b": 0, "whole.bin": PackFileLimit, "parts.bin": 3*testPart + 7}
	at := time.Date(2026, 12, 2, 15, 57, 43, 123456789, time.UTC)
	set := func(base time.Time) map[string]manifest.NanoTime {
		want := map[string]manifest.NanoTime{}
		i := 0
		for name := range sizes {
			i++
			when := base.Add(time.Duration(i) * 1001 * time.Nanosecond)
			if err := os.Chtimes(filepath.Join(dir, name), when, when); err != nil {
				t.Fatal(err)
			}
			want[name] = manifest.NanoTime(when.UnixNano())
		}
		return want
	}
	for i, name := range []string{"rank0/small-a", "rank0/small-b", "whole.bin", "parts.bin"} {
		writeRandom(t, filepath.Join(dir, name), sizes[name], int64(i+1))
	}
	check := func(res PushResult, want map[string]manifest.NanoTime, dedup int64) {
		t.Helper()
		if res.Stats.DedupFiles != dedup {
			t.Fatalf("%d files deduplicated, want %d", res.Stats.DedupFiles, dedup)
		}
		for _, f := range res.Manifest.Files {
			if f.MTime != want[f.Path] {
				t.Errorf("%s (packed %v, part size %d): mtime %v, want %v", f.Path, f.Packed(), f.PartSize, f.MTime.Time(), want[f.Path].Time())
			}
		}
	}
	want := set(at)
	first, err := push(t, st, dir, 1, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(first, want, 0)
	want = set(at.Add(time.Hour)) // touched: same bytes, new times
	second, err := push(t, st, dir, 2, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(second, want, int64(len(sizes)))
}
