package copier

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// object is one object to send: a file's bytes, or a pack's, at the
// source and where they go at the destination.
type object struct {
	src  manifest.File // path, size, hash and key at the source; a pack's first member sent
	size int64         // the object's size: the file's, or its pack's
	// members are all the files of a pack (those deduplicated included:
	// their bytes are in it too), nil for a file's own object.
	members []manifest.File
	key     string // key at the destination
	part    int64  // part size at the destination, 0 for one PUT
	// upload is an unfinished upload of key that an earlier run left, or nil.
	upload *store.Upload
}

// content identifies a file's bytes.
type content struct {
	blake3 string
	size   int64
}

// plan builds the destination's manifest for src and the objects to send:
// files the destination's previous step (or current, the revision of the
// step it holds) holds are deduplicated, objects an earlier run completed
// are kept, the rest are sent, a pack once for all its files.
func (c *copier) plan(ctx context.Context, src, current *manifest.Manifest) (*manifest.Manifest, []*object, error) {
	prev, err := c.previousObjects(ctx, src.Step)
	if err != nil {
		return nil, nil, err
	}
	if current != nil {
		prev = index(prev, current)
	}
	out := *src
	out.Shards = nil
	out.Files = make([]manifest.File, len(src.Files))
	packs := packMembers(src.Files)
	byKey := map[string]*object{}
	var objs []*object
	for i, f := range src.Files {
		nf, ob, err := c.place(f, prev, packs)
		if err != nil {
			return nil, nil, err
		}
		out.Files[i] = nf
		if ob == nil {
			continue
		}
		if have, ok := byKey[ob.key]; ok {
			if have.members == nil && (have.src.BLAKE3 != f.BLAKE3 || have.src.Size != f.Size) {
				return nil, nil, fmt.Errorf("the source manifest names object %s for %s and %s with different bytes", f.Key, have.src.Path, f.Path)
			}
			continue
		}
		byKey[ob.key] = ob
		objs = append(objs, ob)
	}
	// Format 3 when a pack is named, whether copied or deduplicated.
	out.Format = manifest.FormatFor(manifest.FormatVersion, out.Files)
	todo, err := c.atDestination(ctx, objs)
	return &out, todo, err
}

// place is f's entry in the destination's manifest and the object that
// holds its bytes there: none to send when the destination holds them
// already (prev, by content), whose entry it then takes (key, part size,
// and pack and offset when packed); else f's own object or its pack.
func (c *copier) place(f manifest.File, prev map[content]manifest.File, packs map[string][]manifest.File) (manifest.File, *object, error) {
	if d, ok := prev[content{f.BLAKE3, f.Size}]; ok {
		f.Key, f.PartSize, f.PackSize, f.Offset = d.Key, d.PartSize, d.PackSize, d.Offset
		c.res.Deduplicated++
		return f, nil, nil
	}
	key, err := c.mapKey(f.Key)
	if err != nil {
		return f, nil, err
	}
	ob := &object{src: f, size: f.ObjectSize(), key: key}
	if f.Packed() {
		if err := checkPackSize(f); err != nil {
			return f, nil, err
		}
		ob.members = packs[f.Key]
	} else {
		ob.part = c.partSizeFor(f.Size)
	}
	f.Key, f.PartSize = key, ob.part
	return f, ob, nil
}

// previousObjects indexes by content the files of the destination's
// committed step before step, for deduplication: one LIST and one GET. A
// previous manifest that cannot be read only disables deduplication.
func (c *copier) previousObjects(ctx context.Context, step int64) (map[content]manifest.File, error) {
	if step == 0 {
		return nil, nil
	}
	prev, err := remote.StepAtOrBefore(ctx, c.o.To, c.o.ToPrefix, step-1)
	if errors.Is(err, remote.ErrNoCheckpoint) {
		return nil, nil
	}
	var m *manifest.Manifest
	if err == nil {
		m, err = remote.Get(ctx, c.o.To, c.o.ToPrefix, prev)
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, store.ErrNoBucket) {
			return nil, fmt.Errorf("read the destination's previous step: %w", err)
		}
		c.log.Warn("cannot read the destination's previous step; sending every file", zap.Error(err))
		return nil, nil
	}
	return index(nil, m), nil
}

// index adds m's files to idx by content.
func index(idx map[content]manifest.File, m *manifest.Manifest) map[content]manifest.File {
	if idx == nil {
		idx = make(map[content]manifest.File, len(m.Files))
	}
	for _, f := range m.Files {
		idx[content{f.BLAKE3, f.Size}] = f
	}
	return idx
}

// atDestination drops the objects already complete at the destination
// (an earlier run sent them) and notes the unfinished uploads of the
// others: one LIST and one ListMultipartUploads per step folder.
func (c *copier) atDestination(ctx context.Context, objs []*object) ([]*object, error) {
	folders := map[string]bool{}
	for _, ob := range objs {
		folders[c.stepFolder(ob.key)] = true
	}
	have := map[string]int64{}
	uploads := map[string]store.Upload{}
	for folder := range folders {
		err := c.o.To.List(ctx, folder, "", 0, func(o store.ObjectInfo) error {
			have[o.Key] = o.Size
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list the destination's objects under %s: %w", folder, err)
		}
		ups, err := c.o.To.ListUploads(ctx, folder)
		if err != nil {
			return nil, fmt.Errorf("list the destination's unfinished uploads under %s: %w", folder, err)
		}
		for _, u := range ups {
			if old, ok := uploads[u.Key]; !ok || u.Initiated.After(old.Initiated) {
				uploads[u.Key] = u
			}
		}
	}
	var todo []*object
	for _, ob := range objs {
		if size, ok := have[ob.key]; ok && size == ob.size {
			c.res.Present++
			continue
		}
		if u, ok := uploads[ob.key]; ok {
			ob.upload = &u
		}
		todo = append(todo, ob)
	}
	return todo, nil
}

// mapKey is the destination key of a source object: the same key below
// the destination's data prefix as below the source's.
func (c *copier) mapKey(key string) (string, error) {
	from := manifest.DataPrefix(c.o.FromPrefix)
	rest, ok := strings.CutPrefix(key, from)
	if !ok || rest == "" {
		return "", fmt.Errorf("the source manifest names object %q outside %q", key, from)
	}
	return manifest.DataPrefix(c.o.ToPrefix) + rest, nil
}

// stepFolder is the data folder of one step that holds key (its first
// level below the data prefix), or the data prefix itself.
func (c *copier) stepFolder(key string) string {
	data := manifest.DataPrefix(c.o.ToPrefix)
	rest := strings.TrimPrefix(key, data)
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return data + rest[:i+1]
	}
	return data
}

// partSizeFor is the destination part size of a file of size bytes: 0 (one
// PUT) up to the part size, else the part size doubled until the file
// fits in store.MaxParts parts. Powers of two keep every part a complete
// BLAKE3 subtree.
func (c *copier) partSizeFor(size int64) int64 {
	if size <= c.o.PartSize {
		return 0
	}
	p := c.o.PartSize
	for (size+p-1)/p > store.MaxParts {
		p *= 2
	}
	return p
}
