package verify

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// found is the size of each referenced object found in the bucket.
type found map[string]int64

// problem returns what is wrong with f's object, and false, or true when
// it is there with the file's size.
func (o found) problem(step int64, f manifest.File) (Problem, bool) {
	size, ok := o[f.Key]
	switch {
	case !ok:
		return Problem{Step: step, Kind: Missing, Path: f.Path, Key: f.Key, Detail: "no object at " + f.Key}, false
	case size != f.Size:
		return Problem{Step: step, Kind: WrongSize, Path: f.Path, Key: f.Key,
			Detail: fmt.Sprintf("object has %d bytes, the manifest says %d", size, f.Size)}, false
	}
	return Problem{}, true
}

// checkObjects finds the objects files reference. Objects sit in one
// folder per push attempt (and deduplicated files in earlier steps'
// folders), so a folder holding several of them is listed, 1,000 keys per
// request, and a folder holding one is asked with a HEAD: whichever takes
// fewer requests.
func checkObjects(ctx context.Context, st store.Store, files []manifest.File) (found, error) {
	byDir := map[string][]string{}
	for _, f := range files {
		dir := path.Dir(f.Key) + "/"
		byDir[dir] = append(byDir[dir], f.Key)
	}
	out := found{}
	for dir, keys := range byDir {
		if len(keys) == 1 {
			if err := head(ctx, st, keys[0], out); err != nil {
				return nil, err
			}
			continue
		}
		want := make(map[string]bool, len(keys))
		for _, k := range keys {
			want[k] = true
		}
		err := st.List(ctx, dir, "", 0, func(o store.ObjectInfo) error {
			if want[o.Key] {
				out[o.Key] = o.Size
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
	}
	return out, nil
}

// head records the size of the object at key, if there is one.
func head(ctx context.Context, st store.Store, key string, out found) error {
	info, err := st.Head(ctx, key)
	switch {
	case err == nil:
		out[key] = info.Size
	case !errors.Is(err, store.ErrNotExist):
		return fmt.Errorf("head %s: %w", key, err)
	}
	return nil
}
