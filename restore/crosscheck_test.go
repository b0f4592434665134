package restore

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// crossSteps commits steps 1 and 2 of a 2-rank checkpoint (a shared file
// and a shard per rank) and returns step 2's manifest and each step's
// files.
func crossSteps(t *testing.T, st store.Store) (*manifest.Manifest, map[int64][]tfile) {
	t.Helper()
	files := map[int64][]tfile{}
	var m *manifest.Manifest
	for _, step := range []int64{1, 2} {
		files[step] = []tfile{
			{path: "shared.json", data: randBytes(500, uint64(step*10))},
			{path: "rank0.pt", data: randBytes(20000, uint64(step*10+1)), rank: rank(0)},
			{path: "rank1.pt", data: randBytes(30000, uint64(step*10+2)), rank: rank(1)},
		}
		m = commit(t, st, step, files[step], nil)
	}
	return m, files
}

// A restore of rank 0's files of the latest step checks rank 1's object
// by size: deleted or cut short, step 2 is damaged for this node too, so
// it restores step 1 (rank 0's files and the shared one), naming rank 1's
// file and what is wrong, and records step 2 (before, it placed step 2
// while the node of rank 1 fell back to step 1). --step 2 restores step 2
// whatever another node's file holds: the check is for the latest.
func TestLatestRanksCheckOtherObjects(t *testing.T) {
	for _, damage := range []string{"deleted", "truncated"} {
		t.Run(damage, func(t *testing.T) {
			st := store.NewMemStore()
			m, files := crossSteps(t, st)
			key := m.Files[2].Key
			if damage == "deleted" {
				if err := st.Delete(context.Background(), key); err != nil {
					t.Fatal(err)
				}
			} else {
				overwrite(t, st, key, files[2][2].data[:29000])
			}
			dir := t.TempDir()
			res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep,
				Ranks: RankRange(0, 1).Filter(), Fallback: true, RecordBy: "test"})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"deleted": "missing: no object at " + key, "truncated": "wrong size: object has 29000 bytes, the manifest says 30000"}[damage]
			if res.Step != 1 || len(res.Skipped) != 1 || res.Skipped[0].Path != "rank1.pt" || res.Skipped[0].Key != key ||
				!strings.Contains(res.Skipped[0].Reason, want) || res.Skipped[0].Record != "recorded" {
				t.Fatalf("step %d, skipped %+v; want step 1, rank1.pt skipped: %s", res.Step, res.Skipped, want)
			}
			if got := tree(t, dir); strings.Join(got, " ") != "rank0.pt shared.json" {
				t.Fatalf("target holds %v", got)
			}
			assertFile(t, filepath.Join(dir, "rank0.pt"), files[1][1].data)
			d, ok, err := remote.DamageOf(context.Background(), st, testPrefix, 2)
			if err != nil || !ok || d.Path != "rank1.pt" {
				t.Fatalf("damage record %+v, %v, %v", d, ok, err)
			}

			dir = t.TempDir()
			res, err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 2, Ranks: RankRange(0, 1).Filter()})
			if err != nil || res.Step != 2 {
				t.Fatalf("--step 2: step %d, %v", res.Step, err)
			}
			assertFile(t, filepath.Join(dir, "rank0.pt"), files[2][1].data)
		})
	}
}

// A restore whose own files are good does not place the step when another
// node records it damaged while this one downloads (the record is written
// during its GET of rank0.pt): with Fallback it restores step 1, "already
// recorded", the reason saying the record came meanwhile; without, it
// fails as damaged. Either way nothing of step 2 is placed.
func TestLatestRecordedMeanwhile(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		mem := store.NewMemStore()
		m, files := crossSteps(t, mem)
		st := &hookStore{Store: mem}
		st.body = func(key string, _ int64, n int, rc io.ReadCloser) io.ReadCloser {
			if key == m.Files[1].Key && n == 0 {
				d := remote.Damage{Step: 2, Path: "rank1.pt", Key: m.Files[2].Key, Reason: "BLAKE3 mismatch", By: "node-b", At: time.Now()}
				if _, err := remote.RecordDamage(context.Background(), mem, testPrefix, d); err != nil {
					t.Error(err)
				}
			}
			return rc
		}
		dir := t.TempDir()
		res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep,
			Ranks: RankRange(0, 1).Filter(), Fallback: fallback})
		if !fallback {
			if !errors.Is(err, ErrDamaged) || len(res.Skipped) != 1 || res.Skipped[0].Record != "already recorded" {
				t.Fatalf("without fallback: %v, skipped %+v; want ErrDamaged, already recorded", err, res.Skipped)
			}
			if got := tree(t, dir); len(got) != 0 {
				t.Fatalf("a failed restore left %v", got)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		s := res.Skipped
		if res.Step != 1 || len(s) != 1 || s[0].Step != 2 || s[0].Path != "rank1.pt" || s[0].Record != "already recorded" ||
			!strings.Contains(s[0].Reason, "while this restore read it, by node-b: BLAKE3 mismatch") {
			t.Fatalf("step %d, skipped %+v", res.Step, s)
		}
		assertFile(t, filepath.Join(dir, "rank0.pt"), files[1][1].data)
		assertNoTemps(t, dir)
	}
}

// A whole restore that keeps a file already in place (its bytes right,
// no GET) checks that file's object too: another node, without the file,
// could not restore the step, so neither does this one.
func TestLatestChecksKeptFilesObjects(t *testing.T) {
	st := store.NewMemStore()
	m, files := crossSteps(t, st)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rank1.pt"), files[2][2].data)
	if err := st.Delete(context.Background(), m.Files[2].Key); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, Fallback: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Step != 1 || len(res.Skipped) != 1 || res.Skipped[0].Path != "rank1.pt" || !strings.Contains(res.Skipped[0].Reason, "missing") {
		t.Fatalf("step %d, skipped %+v; want step 1, rank1.pt missing", res.Step, res.Skipped)
	}
	assertFile(t, filepath.Join(dir, "rank1.pt"), files[1][2].data)
}
