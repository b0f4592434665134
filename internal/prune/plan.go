package prune

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// readers bounds the manifests read at once.
const readers = 16

// planner holds what MakePlan has read.
type planner struct {
	opts Options
	now  time.Time
	// keep is every object key that must stay: referenced by a kept
	// manifest, a young tombstone or a live node part. It is by key, not
	// by file: a pack that the files of several steps name stays while any
	// of them references it, and, found once by the LIST of objects, is
	// deleted once when none does.
	keep map[string]bool
	// graced is every other object key a pruned manifest or a young
	// tombstone references, with the time the grace period ends for it:
	// kept now, deleted by a prune run after that (Plan.Later).
	graced map[string]time.Time
	// liveSteps are uncommitted steps with live node parts: everything
	// under their data prefix stays.
	liveSteps map[int64]bool
	mu        sync.Mutex
}

// MakePlan reads the bucket and decides what to delete. It deletes nothing.
// A manifest, tombstone or live part it cannot read fails the plan: its
// references would be unknown.
func MakePlan(ctx context.Context, opts Options) (*Plan, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	pl := &planner{opts: opts, now: opts.Now(), keep: map[string]bool{}, graced: map[string]time.Time{}, liveSteps: map[int64]bool{}}
	p := &Plan{tombstoneData: map[string][]byte{}}
	committed, err := pl.manifests(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := pl.tombstones(ctx, p); err != nil {
		return nil, err
	}
	if err := pl.parts(ctx, p, committed); err != nil {
		return nil, err
	}
	if err := pl.objects(ctx, p); err != nil {
		return nil, err
	}
	if err := pl.checkins(ctx, p); err != nil {
		return nil, err
	}
	if err := pl.uploads(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// manifests decides which committed steps stay, reads every manifest (the
// pruned ones to copy into tombstones) and returns the committed steps and
// whether each is kept.
func (pl *planner) manifests(ctx context.Context, p *Plan) (map[int64]bool, error) {
	st, prefix := pl.opts.Store, pl.opts.Prefix
	steps, err := remote.Steps(ctx, st, prefix, 0)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	// A step recorded damaged (restore, verify --mark-damaged) is not
	// restorable: it does not count towards KeepLast, so the newest
	// restorable steps are never pruned to keep damaged ones.
	damaged, err := remote.DamagedSteps(ctx, st, prefix)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	committed := make(map[int64]bool, len(steps))
	restorable := 0 // restorable steps newer than s
	for _, s := range steps {
		held := pl.opts.Hold[s]
		kept := held || pl.opts.Policy.Keeps(s, restorable)
		if _, bad := damaged[s]; !bad && !held {
			restorable++
		}
		committed[s] = kept
		if kept {
			p.Kept = append(p.Kept, s)
		} else {
			p.Pruned = append(p.Pruned, s)
		}
	}
	// Pruned manifests' objects are protected by their new tombstones,
	// unless the grace period is zero.
	protectPruned := pl.opts.MinAge > 0
	err = pl.each(ctx, steps, func(ctx context.Context, step int64) error {
		key := manifest.ManifestKey(prefix, step)
		data, err := remote.ReadObject(ctx, st, key)
		if err != nil {
			return fmt.Errorf("prune: read manifest of step %d: %w", step, err)
		}
		m, err := manifest.DecodeBytes(data, prefix)
		if err != nil {
			return fmt.Errorf("prune: manifest of step %d (%s) is unreadable, so what it references is unknown; fix or remove it first: %w", step, key, err)
		}
		if committed[step] || protectPruned {
			var until time.Time // kept for good
			if !committed[step] {
				until = pl.now.Add(pl.opts.MinAge) // its new tombstone's grace
			}
			if err := pl.referenceManifest(ctx, m, until); err != nil {
				return fmt.Errorf("prune: manifest of step %d (%s): %w", step, key, err)
			}
		}
		if !committed[step] && protectPruned {
			pl.mu.Lock()
			p.tombstoneData[manifest.PrunedKey(prefix, step)] = data
			pl.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, s := range p.Pruned {
		if protectPruned {
			p.Tombstones = append(p.Tombstones, manifest.PrunedKey(prefix, s))
		}
		p.Manifests = append(p.Manifests, manifest.ManifestKey(prefix, s))
	}
	return committed, nil
}

// tombstones protects the objects of young tombstones and expires old ones.
func (pl *planner) tombstones(ctx context.Context, p *Plan) error {
	st, prefix := pl.opts.Store, pl.opts.Prefix
	var young []string
	ends := map[string]time.Time{} // young tombstone -> end of its grace
	err := st.List(ctx, manifest.PrunedPrefix(prefix), "", 0, func(o store.ObjectInfo) error {
		if _, ok := manifest.StepFromPrunedKey(prefix, o.Key); !ok {
			return nil
		}
		if _, rewritten := p.tombstoneData[o.Key]; rewritten {
			return nil // pruned again now (re-committed since): protected below
		}
		if pl.now.Sub(o.LastModified) >= pl.opts.MinAge {
			p.ExpiredTombstones = append(p.ExpiredTombstones, o.Key)
		} else {
			young = append(young, o.Key)
			ends[o.Key] = o.LastModified.Add(pl.opts.MinAge)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune: list tombstones: %w", err)
	}
	return pl.eachKey(ctx, young, func(ctx context.Context, key string) error {
		data, err := remote.ReadObject(ctx, st, key)
		if errors.Is(err, store.ErrNotExist) {
			return nil // expired by a concurrent prune
		}
		if err != nil {
			return fmt.Errorf("prune: read tombstone %s: %w", key, err)
		}
		m, err := manifest.DecodeBytes(data, prefix)
		if err != nil {
			return fmt.Errorf("prune: tombstone %s is unreadable: %w", key, err)
		}
		if err := pl.referenceManifest(ctx, m, ends[key]); err != nil {
			return fmt.Errorf("prune: tombstone %s: %w", key, err)
		}
		return nil
	})
}

// parts deletes the node parts of pruned steps and of steps never committed
// whose parts are all older than AbandonedAfter, and protects what the
// other uncommitted steps' parts reference.
func (pl *planner) parts(ctx context.Context, p *Plan, committed map[int64]bool) error {
	st, prefix := pl.opts.Store, pl.opts.Prefix
	type stepParts struct {
		keys, markers []string
		newest        time.Time
	}
	byStep := map[int64]*stepParts{}
	var order []int64
	err := st.List(ctx, manifest.PartsPrefix(prefix), "", 0, func(o store.ObjectInfo) error {
		set, _, isPart := manifest.ParsePartKey(prefix, o.Key)
		if !isPart {
			var isMarker bool
			if set, isMarker = manifest.ParseMarkerKey(prefix, o.Key); !isMarker {
				return nil
			}
		}
		step := set.Step
		sp := byStep[step]
		if sp == nil {
			sp = &stepParts{}
			byStep[step] = sp
			order = append(order, step)
		}
		if !isPart {
			// A commit claim or done marker goes with its step's parts
			// but is never read as one.
			sp.markers = append(sp.markers, o.Key)
			return nil
		}
		sp.keys = append(sp.keys, o.Key)
		if o.LastModified.After(sp.newest) {
			sp.newest = o.LastModified
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune: list node parts: %w", err)
	}
	var live []string
	for _, step := range order {
		sp := byStep[step]
		kept, isCommitted := committed[step]
		switch {
		case isCommitted && kept:
			// Audit trail of a kept step; its manifest references its objects.
		case isCommitted, pl.now.Sub(sp.newest) >= pl.opts.AbandonedAfter:
			p.Parts = append(append(p.Parts, sp.keys...), sp.markers...)
		default:
			pl.liveSteps[step] = true
			live = append(live, sp.keys...)
		}
	}
	return pl.eachKey(ctx, live, func(ctx context.Context, key string) error {
		data, err := remote.ReadObject(ctx, st, key)
		if errors.Is(err, store.ErrNotExist) {
			return nil // its step was committed and pruned meanwhile
		}
		if err != nil {
			return fmt.Errorf("prune: read node part %s: %w", key, err)
		}
		part, err := manifest.DecodePart(data, prefix)
		if err != nil {
			return fmt.Errorf("prune: node part %s is unreadable: %w", key, err)
		}
		pl.reference(part.Files, time.Time{})
		return nil
	})
}

// objects deletes data objects nothing needs that are older than MinAge.
func (pl *planner) objects(ctx context.Context, p *Plan) error {
	st, prefix := pl.opts.Store, pl.opts.Prefix
	dp := manifest.DataPrefix(prefix)
	err := st.List(ctx, dp, "", 0, func(o store.ObjectInfo) error {
		if pl.keep[o.Key] {
			return nil
		}
		if step, ok := manifest.StepFromDataKey(prefix, o.Key); ok && pl.liveSteps[step] {
			return nil
		}
		if pl.later(p, o) {
			return nil
		}
		p.Objects = append(p.Objects, o.Key)
		p.ObjectBytes += o.Size
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune: list objects under %s: %w", dp, err)
	}
	return nil
}

// uploads aborts multipart uploads initiated more than AbandonedAfter ago.
func (pl *planner) uploads(ctx context.Context, p *Plan) error {
	ups, err := pl.opts.Store.ListUploads(ctx, manifest.DataPrefix(pl.opts.Prefix))
	if err != nil {
		return fmt.Errorf("prune: list multipart uploads: %w", err)
	}
	for _, u := range ups {
		if pl.now.Sub(u.Initiated) >= pl.opts.AbandonedAfter {
			p.Uploads = append(p.Uploads, u)
		}
	}
	sort.Slice(p.Uploads, func(i, j int) bool {
		return p.Uploads[i].Key+"\x00"+p.Uploads[i].UploadID < p.Uploads[j].Key+"\x00"+p.Uploads[j].UploadID
	})
	return nil
}

// referenceManifest keeps what a manifest references: its files' objects
// and, for a sharded manifest, its shards (read to learn its files; a
// shard that cannot be read stops the prune: what it references is unknown).
// A zero until keeps them for good; else until the grace period ends then.
func (pl *planner) referenceManifest(ctx context.Context, m *manifest.Manifest, until time.Time) error {
	full, err := remote.Resolve(ctx, pl.opts.Store, pl.opts.Prefix, m, nil)
	if err != nil {
		return err
	}
	pl.reference(full.Files, until)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, sh := range m.Shards {
		pl.keepLocked(sh.Key, until)
	}
	return nil
}

func (pl *planner) reference(files []manifest.File, until time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, f := range files {
		pl.keepLocked(f.Key, until)
	}
}

// keepLocked keeps key for good (zero until) or until then, whichever
// of the references so far keeps it longest.
func (pl *planner) keepLocked(key string, until time.Time) {
	switch {
	case until.IsZero():
		pl.keep[key] = true
	case until.After(pl.graced[key]):
		pl.graced[key] = until
	}
}

// each runs fn for every step, a few at a time.
func (pl *planner) each(ctx context.Context, steps []int64, fn func(context.Context, int64) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readers)
	for _, s := range steps {
		g.Go(func() error { return fn(gctx, s) })
	}
	return g.Wait()
}

// eachKey runs fn for every key, a few at a time.
func (pl *planner) eachKey(ctx context.Context, keys []string, fn func(context.Context, string) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readers)
	for _, k := range keys {
		g.Go(func() error { return fn(gctx, k) })
	}
	return g.Wait()
}

// logPlan logs a summary of a plan.
func logPlan(log *zap.Logger, p *Plan, dryRun bool) {
	msg := "pruning"
	if dryRun {
		msg = "prune plan (dry run)"
	}
	log.Info(msg, zap.Int64s("kept_steps", p.Kept), zap.Int64s("pruned_steps", p.Pruned),
		zap.Int("objects", len(p.Objects)), zap.Int64("object_bytes", p.ObjectBytes),
		zap.Int("parts", len(p.Parts)), zap.Int("expired_tombstones", len(p.ExpiredTombstones)), zap.Int("checkins", len(p.Checkins)),
		zap.Int("uploads", len(p.Uploads)))
}
