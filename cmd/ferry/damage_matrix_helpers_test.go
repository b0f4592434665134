package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// matrixRanks is the world size of the matrix's steps: a DCP-like folder
// step-N/ of a .metadata and a shard __R_0.distcp per rank.
const matrixRanks = 4

// matrixRun is the pushed run every case copies: steps 500 and 600, no
// byte in common (so no object is shared between them).
type matrixRun struct {
	bucket string
	good   map[int64]map[string][]byte // step -> manifest path -> bytes
	latest *manifest.Manifest          // step 600's
}

// pushMatrixRun pushes steps 500 and 600 once. Files are plain objects
// (--pack=false): every file of the step is an object of its own, so a
// damaged object is one damaged file.
func pushMatrixRun(t *testing.T, srv *s3test.Server) matrixRun {
	t.Helper()
	run := matrixRun{bucket: srv.NewBucket(t), good: map[int64]map[string][]byte{}}
	url := "s3://" + run.bucket + "/run"
	for _, step := range []int64{500, 600} {
		src := t.TempDir()
		files := map[string][]byte{}
		name := fmt.Sprintf("step-%d", step)
		files[name+"/.metadata"] = randomBytes(3000, byte(step/100))
		for r := range matrixRanks {
			files[fmt.Sprintf("%s/__%d_0.distcp", name, r)] = randomBytes(40<<10+r*1000, byte(step/100*16+int64(r)+1))
		}
		for p, data := range files {
			writeFile(t, filepath.Join(src, filepath.FromSlash(p)), data)
		}
		ferry(t, srv, "push", "--to", url, "--step", fmt.Sprint(step), "--pack=false", src).must(t, 0)
		run.good[step] = files
	}
	m, err := remote.Get(t.Context(), srv.Store(t, run.bucket), "run", 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if f.Packed() {
			t.Fatalf("%s is packed; the matrix wants an object per file", f.Path)
		}
	}
	run.latest = m
	return run
}

// cloneBucket copies every object of bucket from into a new bucket.
func cloneBucket(t *testing.T, srv *s3test.Server, from string) string {
	t.Helper()
	to := srv.NewBucket(t)
	src, dst := srv.Store(t, from), srv.Store(t, to)
	var keys []string
	if err := src.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		putObject(t, dst, k, readObject(t, src, k))
	}
	return to
}

// Kinds of damage.
const (
	flippedByte     = "flipped byte"
	truncatedObject = "truncated object"
	deletedObject   = "deleted object"
	deletedManifest = "deleted manifest"
	corruptManifest = "corrupt manifest"
)

// damageCase is one kind of damage in one file of step 600 (path empty:
// the manifest).
type damageCase struct {
	kind, path string
}

func (d damageCase) name() string {
	if d.path == "" {
		return strings.ReplaceAll(d.kind, " ", "-")
	}
	return strings.ReplaceAll(d.kind, " ", "-") + "/" + strings.TrimPrefix(d.path, "step-600/")
}

// damageCases are every file damage in every file of step 600 (the
// marker .metadata and each rank's shard), and the manifest's.
func damageCases() []damageCase {
	paths := []string{"step-600/.metadata"}
	for r := range matrixRanks {
		paths = append(paths, fmt.Sprintf("step-600/__%d_0.distcp", r))
	}
	var out []damageCase
	for _, kind := range []string{flippedByte, truncatedObject, deletedObject} {
		for _, p := range paths {
			out = append(out, damageCase{kind: kind, path: p})
		}
	}
	return append(out, damageCase{kind: deletedManifest}, damageCase{kind: corruptManifest})
}

// inject damages step 600 (m) in st and returns the damaged object's key.
func (d damageCase) inject(t *testing.T, st store.Store, m *manifest.Manifest) string {
	t.Helper()
	key := manifest.ManifestKey("run", 600)
	for _, f := range m.Files {
		if f.Path == d.path {
			key = f.Key
		}
	}
	data := readObject(t, st, key)
	switch d.kind {
	case flippedByte:
		data[len(data)/2] ^= 0x10
		putObject(t, st, key, data)
	case truncatedObject:
		putObject(t, st, key, data[:len(data)-100])
	case corruptManifest:
		putObject(t, st, key, data[:len(data)/2])
	case deletedObject, deletedManifest:
		if err := st.Delete(t.Context(), key); err != nil {
			t.Fatal(err)
		}
	}
	return key
}

// reason is what the skip's reason must say: as the node that read the
// file found it, or as a node that checked its object's size.
func (d damageCase) reason(read bool) string {
	switch {
	case d.kind == flippedByte:
		return "BLAKE3 mismatch"
	case d.kind == corruptManifest:
		return "manifest"
	case read && d.kind == truncatedObject:
		return "object ended"
	case read:
		return "does not exist"
	case d.kind == truncatedObject:
		return "wrong size"
	}
	return "missing"
}

// shardRank is the rank of a shard's path; false for the .metadata.
func shardRank(path string) (int, bool) {
	base := filepath.Base(path)
	if !strings.HasPrefix(base, "__") {
		return 0, false
	}
	r, err := strconv.Atoi(strings.TrimPrefix(strings.Split(base, "_0.")[0], "__"))
	return r, err == nil
}

// selects reports whether a --ranks spec ("" all, "R", "A-B") holds r.
func selects(spec string, r int) bool {
	if spec == "" {
		return true
	}
	lo, hi, ok := strings.Cut(spec, "-")
	if !ok {
		hi = lo
	}
	a, _ := strconv.Atoi(lo)
	b, _ := strconv.Atoi(hi)
	return a <= r && r <= b
}

// nodeOutcome is one node's restore.
type nodeOutcome struct {
	code           int
	stdout, stderr string
	sum            restoreSummary
}

// restoreRound runs one restore per node at once, with the entrypoint
// flags the docs give, node n into dirs[n] with extra[n] added to its
// arguments and env[n] to its environment. Each must exit 0 with its
// --json.
func restoreRound(t *testing.T, srv *s3test.Server, url string, dirs []string, extra, env [][]string) []nodeOutcome {
	t.Helper()
	out := make([]nodeOutcome, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for n := range dirs {
		args := []string{"restore", "--from", url, "--to", dirs[n], "--allow-empty", "--on-damaged", "previous", "--set-aside-newer", "--json"}
		cmd := ferryCmd(t, srv, append(args, extra[n]...)...)
		cmd.Env = append(cmd.Env, env[n]...)
		wg.Go(func() {
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); ok {
				out[n].code, err = ee.ExitCode(), nil
			}
			out[n].stdout, out[n].stderr, errs[n] = o.String(), e.String(), err
		})
	}
	wg.Wait()
	for n, o := range out {
		if errs[n] != nil {
			t.Fatalf("node %d: run ferry: %v", n, errs[n])
		}
		if o.code != 0 {
			t.Fatalf("node %d: restore exit %d, want 0\nstdout: %s\nstderr: %s", n, o.code, o.stdout, o.stderr)
		}
		if err := json.Unmarshal([]byte(o.stdout), &out[n].sum); err != nil {
			t.Fatalf("node %d: restore --json: %v\n%s", n, err, o.stdout)
		}
	}
	return out
}

// holdsExactly checks that dir holds the files of want at their final
// paths with those bytes, and nothing else but folders set aside: no
// other file, no temp file of a restore, and no step folder newer than
// the one restored (a trainer resuming from its newest folder takes the
// newest).
func holdsExactly(dir string, want map[string][]byte) error {
	var problems []string
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && strings.Contains(d.Name(), detect.SetAsideMark):
			return filepath.SkipDir
		case d.IsDir():
			return nil
		}
		data, ok := want[rel]
		switch {
		case !ok:
			problems = append(problems, rel+" is not a file of the restored step")
		default:
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, data) {
				problems = append(problems, rel+" differs from the pushed file")
			}
			seen[rel] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	for rel := range want {
		if !seen[rel] {
			problems = append(problems, rel+" is missing")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}
