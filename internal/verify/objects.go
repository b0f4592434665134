package verify

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

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

// Sizes checks, without reading any byte, that every object files
// reference is in the bucket with the size the manifest records (the
// pack's for a packed file), and returns a problem for each that is not
// (Missing, WrongSize; a pack's names every file of files it holds).
// limit bounds the requests in flight. A restore of some ranks asks it
// about the files it does not download, so that it places a step only if
// the other nodes can restore it too.
func Sizes(ctx context.Context, st store.Store, step int64, files []manifest.File, limit int) ([]Problem, error) {
	present, err := checkObjects(ctx, st, files, limit)
	if err != nil {
		return nil, err
	}
	probs, _ := present.problems(step, files)
	return probs, nil
}

// checkObjects finds the objects files reference, each once however many
// files it holds, with up to limit requests in flight. Objects sit in one
// folder per push attempt (and deduplicated files in earlier steps'
// folders), so a folder holding several of them is listed, 1,000 keys per
// request, and a folder holding one is asked with a HEAD: whichever takes
// fewer requests.
func checkObjects(ctx context.Context, st store.Store, files []manifest.File, limit int) (found, error) {
	byDir := map[string]map[string]bool{}
	for _, f := range files {
		dir := folder(f)
		if byDir[dir] == nil {
			byDir[dir] = map[string]bool{}
		}
		byDir[dir][f.Key] = true
	}
	out := found{}
	var mu sync.Mutex
	add := func(key string, size int64) {
		mu.Lock()
		out[key] = size
		mu.Unlock()
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(limit, 1))
	for dir, keys := range byDir {
		if len(keys) == 1 {
			for k := range keys {
				g.Go(func() error { return head(ctx, st, k, add) })
			}
			continue
		}
		g.Go(func() error {
			err := st.List(ctx, dir, "", 0, func(o store.ObjectInfo) error {
				if keys[o.Key] {
					add(o.Key, o.Size)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("list %s: %w", dir, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
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
func head(ctx context.Context, st store.Store, key string, add func(string, int64)) error {
	info, err := st.Head(ctx, key)
	switch {
	case err == nil:
		add(key, info.Size)
	case !errors.Is(err, store.ErrNotExist):
		return fmt.Errorf("head %s: %w", key, err)
	}
	return nil
}
