package restore

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
)

// folderState returns every entry under dir with its bytes (files), its
// target (links) and its modification time, to compare a folder before
// and after a restore.
func folderState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fi.ModTime().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A step with one damaged object, on a real S3 server, fails its restore
// and leaves the target exactly as it was: no file of the step at a final
// path (before, .metadata and 3 of 4 shards were placed), the files that
// were there kept byte for byte and with their times, no temp files.
func TestFailedRestoreLeavesTargetAsItWas(t *testing.T) {
	for _, damage := range []string{"flipped byte", "deleted object"} {
		t.Run(strings.ReplaceAll(damage, " ", "_"), func(t *testing.T) {
			srv := s3test.Shared(t)
			st := srv.Store(t, srv.NewBucket(t))
			files := []tfile{
				{path: "step-600/.metadata", data: randBytes(3000, 10)},
				{path: "step-600/__0_0.distcp", data: randBytes(2*mib+7, 11)},
				{path: "step-600/__1_0.distcp", data: randBytes(mib, 12)},
				{path: "step-600/__2_0.distcp", data: randBytes(3*mib, 13)},
			}
			m := commit(t, st, 600, files, nil)
			victim := m.Files[3] // the last shard: the others verify first
			switch damage {
			case "flipped byte":
				bad := bytes.Clone(files[3].data)
				bad[mib+1] ^= 1
				overwrite(t, st, victim.Key, bad)
			default:
				if err := st.Delete(context.Background(), victim.Key); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			// What the node held: the step before, and a shard of step 600
			// with other bytes (an earlier, interrupted save).
			writeFile(t, filepath.Join(dir, "step-500/.metadata"), []byte("five hundred"))
			writeFile(t, filepath.Join(dir, "step-600/__1_0.distcp"), []byte("an older shard"))
			old := time.Now().Add(-time.Hour).Truncate(time.Second)
			os.Chtimes(filepath.Join(dir, "step-600/__1_0.distcp"), old, old)
			before := folderState(t, dir)

			_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib})
			if err == nil || !strings.Contains(err.Error(), "step-600/__2_0.distcp") {
				t.Fatalf("got %v, want an error naming step-600/__2_0.distcp", err)
			}
			if damage == "flipped byte" && !errors.Is(err, ErrHashMismatch) {
				t.Errorf("got %v, want a BLAKE3 mismatch", err)
			}
			if damage == "deleted object" && !errors.Is(err, store.ErrNotExist) {
				t.Errorf("got %v, want a missing object", err)
			}
			after := folderState(t, dir)
			for p, v := range after {
				if before[p] != v {
					t.Errorf("%s changed: %.60q, was %.60q", p, v, before[p])
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("%s is gone", p)
				}
			}
			assertNoTemps(t, dir)
		})
	}
}

// A restore killed before its commit leaves its verified files staged: the
// next restore of the step hashes them again and uses them rather than
// downloading them, and a staged copy with the wrong bytes is fetched.
func TestResumeFromStagedFiles(t *testing.T) {
	st := &hookStore{Store: store.NewMemStore()}
	good, wrong := randBytes(2*mib, 1), randBytes(mib, 2)
	m := commit(t, st, 7, []tfile{{path: "a/good.pt", data: good}, {path: "wrong.pt", data: wrong}}, nil)
	dir := t.TempDir()
	jobs := []fileJob{{file: m.Files[0], rel: filepath.FromSlash("a/good.pt")}, {file: m.Files[1], rel: "wrong.pt"}}
	writeFile(t, filepath.Join(dir, "a", stagedName(&jobs[0])), good)
	writeFile(t, filepath.Join(dir, stagedName(&jobs[1])), randBytes(mib, 3))
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 7, ChunkSize: mib})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kept != 1 || res.Downloaded != 1 || len(st.gets(m.Files[0].Key)) != 0 {
		t.Errorf("result %+v, %d GETs of the staged file", res, len(st.gets(m.Files[0].Key)))
	}
	assertFile(t, filepath.Join(dir, "a/good.pt"), good)
	assertFile(t, filepath.Join(dir, "wrong.pt"), wrong)
	assertNoTemps(t, dir)
}
