package restore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

func TestPathFilterMatches(t *testing.T) {
	paths := []string{
		"latest",
		"global_step100/mp_rank_00_model_states.pt",
		"global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
		"global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt",
		"model.safetensors",
		"sub/dir/model-00001.safetensors",
	}
	for _, c := range []struct {
		include, exclude []string
		want             []string
	}{
		{[]string{"global_step100"}, nil, paths[1:4]},
		{[]string{"global_step100/**"}, nil, paths[1:4]},
		{[]string{"*.safetensors"}, nil, paths[4:6]},
		{[]string{"**/model-*.safetensors"}, nil, paths[5:6]},
		{[]string{"global_step100/*model_states*"}, nil, paths[1:2]},
		{nil, []string{"*optim_states*"}, []string{paths[0], paths[1], paths[4], paths[5]}},
		{[]string{"global_step100"}, []string{"zero_pp_rank_?_*"}, paths[1:2]},
		{[]string{"**"}, []string{"sub"}, paths[0:5]},
		{[]string{"/latest"}, nil, paths[0:1]},
	} {
		f, err := NewPathFilter(c.include, c.exclude)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range paths {
			if f.Selects(p) {
				got = append(got, p)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("include %q exclude %q: selected %q, want %q", c.include, c.exclude, got, c.want)
		}
	}
	for _, bad := range []string{"", "/", "a//b", "a/[b", "../x", "a/./b"} {
		if _, err := NewPathFilter([]string{bad}, nil); err == nil {
			t.Errorf("pattern %q: no error", bad)
		}
	}
	if _, err := NewPathFilter(nil, []string{"[z-a"}); err == nil || !strings.Contains(err.Error(), `--exclude "[z-a"`) {
		t.Errorf("bad exclude pattern: %v", err)
	}
}

// Include and exclude over a DeepSpeed and a DCP layout restore exactly the
// selected files, byte for byte, nothing else; they combine with Ranks; a
// link whose target is left out is left out, one whose target is restored
// comes along; an include pattern that matches nothing fails before any
// file is written, unless AllowNoMatch.
func TestRestoreIncludeExclude(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	files := []tfile{
		{path: "latest", data: []byte("global_step100")},
		{path: "global_step100/mp_rank_00_model_states.pt", data: randBytes(3000, 1), rank: rank(0)},
		{path: "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt", data: randBytes(5000, 2), rank: rank(0)},
		{path: "global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", data: randBytes(5001, 3), rank: rank(1)},
		{path: "dcp/__0_0.distcp", data: randBytes(4000, 4), rank: rank(0)},
		{path: "dcp/__1_0.distcp", data: randBytes(4001, 5), rank: rank(1)},
		{path: "dcp/.metadata", data: randBytes(100, 6)},
	}
	links := []manifest.Symlink{{Path: "model.pt", Target: "global_step100/mp_rank_00_model_states.pt"}, {Path: "optim.pt", Target: "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt"}}
	commit(t, st, 100, files, links)
	for _, c := range []struct {
		name             string
		include, exclude []string
		ranks            func(*int) bool
		want             []string
	}{
		{"model only", nil, []string{"*optim_states*"}, nil,
			[]string{"dcp/.metadata", "dcp/__0_0.distcp", "dcp/__1_0.distcp", "global_step100/mp_rank_00_model_states.pt", "latest", "model.pt"}},
		{"one step folder", []string{"global_step100"}, nil, nil,
			[]string{"global_step100/mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
				"global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", "model.pt", "optim.pt"}},
		// Every *.pt file is in global_step100 too: each pattern matches.
		{"overlapping includes", []string{"global_step100", "*.pt"}, nil, nil,
			[]string{"global_step100/mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
				"global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", "model.pt", "optim.pt"}},
		{"dcp with rank 1", []string{"dcp/**"}, nil, func(r *int) bool { return *r == 1 },
			[]string{"dcp/.metadata", "dcp/__1_0.distcp"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pf, err := NewPathFilter(c.include, c.exclude)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 100, Paths: pf, Ranks: c.ranks}); err != nil {
				t.Fatal(err)
			}
			if got := listTree(t, dir); strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("restored %q\nwant %q", got, c.want)
			}
			for _, f := range files {
				if _, err := os.Lstat(filepath.Join(dir, f.path)); err == nil {
					assertFile(t, filepath.Join(dir, f.path), f.data)
				}
			}
		})
	}
	pf, _ := NewPathFilter([]string{"global_step100", "global_step200"}, nil)
	dir := t.TempDir()
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 100, Paths: pf})
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), `"global_step200"`) {
		t.Fatalf("an include matching nothing: %v", err)
	}
	if got := listTree(t, dir); len(got) != 0 {
		t.Fatalf("files written before the error: %q", got)
	}
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 100, Paths: pf, AllowNoMatch: true}); err != nil {
		t.Fatal(err)
	}
	if got := listTree(t, dir); len(got) != 5 {
		t.Fatalf("with AllowNoMatch: %q", got)
	}
}

// listTree returns the files and links under dir, slash-separated, sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}
