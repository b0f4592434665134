package verify

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// found is the size of each referenced object found in the bucket.
type found map[string]int64

// problems returns a problem for each object of files that is missing or
// not the size the manifest records, and the files whose objects are
// fine. A pack's problem is one, naming every file it holds: they all go
// with it.
func (o found) problems(step int64, files []manifest.File) ([]Problem, []manifest.File) {
	var probs []Problem
	var fine []manifest.File
	packs := map[string]int{} // key of a bad pack -> its problem's index
	for _, f := range files {
		if i, seen := packs[f.Key]; seen && f.Packed() {
			probs[i].Paths = append(probs[i].Paths, f.Path)
			continue
		}
		p, ok := o.problem(step, f)
		if ok {
			fine = append(fine, f)
			continue
		}
		if f.Packed() {
			packs[f.Key] = len(probs)
		}
		probs = append(probs, p)
	}
	for _, i := range packs {
		probs[i].Detail += packOf(len(probs[i].Paths))
	}
	return probs, fine
}

// packOf says in a problem's detail how many of the step's files a bad
// pack holds (it may hold other steps' files too).
func packOf(n int) string {
	return fmt.Sprintf(" (a pack holding %d of the step's files)", n)
}

// problem returns what is wrong with f's object, and false, or true when
// it is there with the size the manifest records (the pack's for a packed
// file).
func (o found) problem(step int64, f manifest.File) (Problem, bool) {
	p := Problem{Step: step, Path: f.Path, Key: f.Key}
	if f.Packed() {
		p.Path, p.Paths = "", []string{f.Path}
	}
	size, ok := o[f.Key]
	switch {
	case !ok:
		p.Kind, p.Detail = Missing, "no object at "+f.Key
	case size != f.ObjectSize():
		p.Kind, p.Detail = WrongSize, fmt.Sprintf("object has %d bytes, the manifest says %d", size, f.ObjectSize())
	default:
		return Problem{}, true
	}
	return p, false
}

// checkObjects finds the objects files reference, each once however many
// files it holds. Objects sit in one folder per push attempt (and
// deduplicated files in earlier steps' folders), so a folder holding
// several of them is listed, 1,000 keys per request, and a folder holding
// one is asked with a HEAD: whichever takes fewer requests.
func checkObjects(ctx context.Context, st store.Store, files []manifest.File) (found, error) {
	byDir := map[string]map[string]bool{}
	for _, f := range files {
		dir := folder(f)
		if byDir[dir] == nil {
			byDir[dir] = map[string]bool{}
		}
		byDir[dir][f.Key] = true
	}
	out := found{}
	for dir, keys := range byDir {
		if len(keys) == 1 {
			for k := range keys {
				if err := head(ctx, st, k, out); err != nil {
					return nil, err
				}
			}
			continue
		}
		err := st.List(ctx, dir, "", 0, func(o store.ObjectInfo) error {
			if keys[o.Key] {
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

// folder is the prefix listed to find f's object: its key's folder, or
// for a pack, which lies in the step's folder beside the attempts' folders,
// the packs of its attempt (<step>/<attempt>.pack-): listing the whole
// step folder would list every file of every attempt again.
func folder(f manifest.File) string {
	dir, base := path.Split(f.Key)
	if f.Packed() {
		if i := strings.Index(base, manifest.PackSep); i >= 0 {
			return dir + base[:i+len(manifest.PackSep)]
		}
	}
	return dir
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
