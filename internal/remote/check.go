package remote

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// CheckObjects verifies that every object named by every committed manifest
// under prefix exists with the size the manifest records: the file's, or
// for a pack the pack's (one HEAD per object, however many files a pack
// holds). It is the invariant "no manifest points at a missing or short
// object", which tests of crashes and races assert.
func CheckObjects(ctx context.Context, st store.Store, prefix string) error {
	steps, err := Steps(ctx, st, prefix, 0)
	if err != nil {
		return err
	}
	for _, n := range steps {
		m, err := Get(ctx, st, prefix, n)
		if err != nil {
			return err
		}
		if err := checkStepObjects(ctx, st, m); err != nil {
			return fmt.Errorf("step %d is committed but %w", n, err)
		}
	}
	return nil
}

// checkStepObjects HEADs each object of m once and names the files it
// holds when it is missing or of another size.
func checkStepObjects(ctx context.Context, st store.Store, m *manifest.Manifest) error {
	var keys []string
	holds := map[string][]manifest.File{}
	for _, f := range m.Files {
		if holds[f.Key] == nil {
			keys = append(keys, f.Key)
		}
		holds[f.Key] = append(holds[f.Key], f)
	}
	for _, k := range keys {
		files := holds[k]
		what := files[0].Path
		if files[0].Packed() {
			what = fmt.Sprintf("pack %s of %s", k, paths(files))
		}
		info, err := st.Head(ctx, k)
		if err != nil {
			return fmt.Errorf("%s is missing: %w", what, err)
		}
		if want := files[0].ObjectSize(); info.Size != want {
			return fmt.Errorf("%s is %d bytes, the manifest says %d", what, info.Size, want)
		}
	}
	return nil
}

// paths lists the files' paths, for a message.
func paths(files []manifest.File) string {
	s := make([]string, len(files))
	for i, f := range files {
		s[i] = f.Path
	}
	return strings.Join(s, ", ")
}
