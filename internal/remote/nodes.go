package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Cross-node commit. A step of an N-node job is committed when every node's
// files are durable, and only then; the object store is the only thing the
// nodes share, so it carries the protocol:
//
//  1. Each node uploads its files, then writes its part manifest
//     P/parts/<step>/[run-<run>/]of-<N>/node-<K>.json with a create-only PUT
//     (an identical part already there counts as written).
//  2. It lists P/parts/<step>/[run-<run>/]of-<N>/ (one page per 1,000
//     nodes), stopping at the first missing node. A part missing: it is
//     done, a later node commits.
//  3. All N present: it claims the merge with a create-only PUT of the
//     set's claim.json (see claim.go). The one node that wins reads the N
//     parts, merges them deterministically (files sorted by path, created =
//     the latest part's) and writes the manifest with a create-only PUT (a
//     412 with identical content is success), then the set's done.json. The
//     others wait for done.json, and merge themselves if the claim's lease
//     runs out: a dead claimant never blocks the step.
//
// With read-after-write and list-after-write consistency (R2, S3), the node
// whose part PUT completes last lists after every other PUT has completed,
// so it sees all N parts: at least one node claims, and a claimant that
// dies is replaced when its lease ends. Create-only PUTs make exactly one
// manifest, and since it is a function of the N parts alone, any node
// writes the same bytes. The common case reads each part once: N GETs for
// the step, not one merge per node that saw the set complete. A node that
// stops between steps 1 and 3 leaves the step uncommitted until another
// node's lease ends or it runs again: its part PUT then finds its identical
// part, and it lists and merges without claiming.
//
// The run separates incarnations of a job: a job restarted from step 1000
// re-saves step 1100, usually with other bytes, and must not complete a set
// with parts its previous incarnation left for 1100 (the merged checkpoint
// would mix ranks from two trainings). With a run identity per incarnation
// the sets never mix; without one, a node whose files differ from its own
// earlier part fails with ErrPartConflict, but a node that had not written
// one could complete the old set.

// partReaders bounds the part manifests read at once by the merging node:
// 4,096 parts at 30 ms a GET take 64 round trips, about 2 s.
const partReaders = 64

// NodeCommit reports what CommitNodePart did.
type NodeCommit struct {
	// Part is the node's part as stored: the caller's, or an identical one
	// already there.
	Part *manifest.Part
	// PartWritten is false when an identical part was already stored: the
	// objects the caller uploaded for this attempt are then not referenced.
	PartWritten bool
	Completion
}

// Completion reports what CompleteStep found and did.
type Completion struct {
	// Present is how many parts the listing found before it stopped: it
	// stops at the first missing node, so with parts missing it counts
	// only those of the nodes below FirstMissing.
	Present int
	// FirstMissing is the lowest node rank whose part is absent; -1 when
	// every part is present.
	FirstMissing int
	// Manifest is the step's committed manifest when this call wrote or
	// read it; nil while parts are missing, and when a peer committed.
	Manifest *manifest.Manifest
	// Committed is true when this call wrote the manifest.
	Committed bool
	// ByPeer is true when another node merged this set and committed the
	// step (its commit marker is present): the manifest holds every part of
	// the set, this node's included. Manifest is then nil: reading it would
	// cost every node a GET of a manifest of up to 64 MiB.
	ByPeer bool
	// Merged is true when this call read every part and merged them.
	Merged bool
}

// Done reports whether the step is committed with the set's parts.
func (c Completion) Done() bool { return c.Manifest != nil || c.ByPeer }

// CommitNodePart writes a node's part manifest and commits the step if every
// node's part is then present. See the protocol above. A part already
// written with different content fails with ErrPartConflict; a step already
// committed with different content fails with ErrConflict.
func CommitNodePart(ctx context.Context, st store.Store, prefix string, p *manifest.Part) (NodeCommit, error) {
	stored, written, err := PutPart(ctx, st, prefix, p)
	if err != nil {
		return NodeCommit{Part: stored}, err
	}
	res := NodeCommit{Part: stored, PartWritten: written}
	// A node that finds its part already written is re-running the step
	// after a stop: whoever claimed the merge may be gone, so it merges
	// without waiting for a claim.
	res.Completion, err = completeStep(ctx, st, prefix, p.Set(), p.NodeRank, !written)
	if err == nil && res.Manifest != nil && !manifest.Contains(res.Manifest, p.AsManifest()) {
		return res, fmt.Errorf("commit step %d: %w: it lacks or differs in files of node %d (compare with `ferry show --step %d`)",
			p.Step, ErrConflict, p.NodeRank, p.Step)
	}
	return res, err
}

// CompleteStep commits a step from the part manifests of a set if all N
// are present, merging at once without claiming the merge: what a node
// does when it re-runs a step whose part it wrote before (its own earlier
// run may have claimed the merge and died). nodeRank is the caller's.
func CompleteStep(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, nodeRank int) (Completion, error) {
	return completeStep(ctx, st, prefix, set, nodeRank, true)
}

// completeStep lists the set's parts and, with all N present, claims the
// merge (or, recovering, merges at once); a node that loses the claim waits
// for the claimant's marker and merges itself if the claim's lease runs out.
func completeStep(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, nodeRank int, recovering bool) (Completion, error) {
	if set.Nodes < 1 || set.Nodes > manifest.MaxNodes {
		return Completion{}, fmt.Errorf("commit step %d: %d nodes outside 1..%d", set.Step, set.Nodes, manifest.MaxNodes)
	}
	if err := manifest.CheckRun(set.Run); err != nil {
		return Completion{}, fmt.Errorf("commit step %d: %w", set.Step, err)
	}
	listStart := time.Now()
	present, missing, err := listParts(ctx, st, prefix, set)
	if err != nil || missing >= 0 {
		return Completion{Present: present, FirstMissing: missing}, err
	}
	c := Completion{Present: present, FirstMissing: -1}
	if recovering {
		return mergeStep(ctx, st, prefix, set, nodeRank, c, true)
	}
	won, err := claimMerge(ctx, st, prefix, set, nodeRank)
	if err != nil {
		return c, err
	}
	if won {
		return mergeStep(ctx, st, prefix, set, nodeRank, c, false)
	}
	byPeer, err := awaitPeer(ctx, st, prefix, set, nodeRank, time.Since(listStart))
	if err != nil || byPeer {
		c.ByPeer = byPeer
		return c, err
	}
	return mergeStep(ctx, st, prefix, set, nodeRank, c, true)
}

// mergeStep reads the set's N parts, merges them and commits the manifest;
// then it writes the set's commit marker for the nodes waiting on it. With
// check, a manifest already there is read instead (one HEAD first saves N
// GETs when another node committed).
func mergeStep(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, nodeRank int, c Completion, check bool) (Completion, error) {
	step := set.Step
	if check {
		if _, err := st.Head(ctx, manifest.ManifestKey(prefix, step)); err == nil {
			c.Manifest, err = Get(ctx, st, prefix, step)
			return c, err
		} else if !errors.Is(err, store.ErrNotExist) {
			return c, fmt.Errorf("commit step %d: check for its manifest: %w", step, err)
		}
	}
	parts, err := readParts(ctx, st, prefix, set)
	if err != nil {
		return c, err
	}
	c.Merged = true
	merged, err := manifest.MergeParts(parts)
	if err != nil {
		return c, err
	}
	if c.Manifest, c.Committed, err = Commit(ctx, st, prefix, merged); err != nil {
		return c, err
	}
	// The manifest is the merge of this set, written now or found
	// identical: tell the waiting nodes. A marker that fails to land only
	// makes them wait out the lease and find the manifest themselves.
	_ = putMarker(ctx, st, manifest.DoneKey(prefix, set), step, nodeRank)
	return c, nil
}

// listParts lists the set's parts in node order and stops at the first
// missing node. It returns how many parts it found and the first missing
// node rank, -1 when all N are present.
func listParts(ctx context.Context, st store.Store, prefix string, set manifest.PartSet) (present, missing int, err error) {
	lp := manifest.StepPartsPrefix(prefix, set)
	err = st.List(ctx, lp, "", 0, func(o store.ObjectInfo) error {
		s, k, ok := manifest.ParsePartKey(prefix, o.Key)
		if !ok || s != set {
			return nil // the set's commit markers
		}
		if k != present {
			return store.ErrStopList // keys sort by node rank: a gap
		}
		present++
		return nil
	})
	if err != nil {
		return present, present, fmt.Errorf("commit step %d: list part manifests under %s: %w", set.Step, lp, err)
	}
	if present == set.Nodes {
		return present, -1, nil
	}
	return present, present, nil
}

// readParts reads the N parts of a set, a few at a time.
func readParts(ctx context.Context, st store.Store, prefix string, set manifest.PartSet) ([]*manifest.Part, error) {
	parts := make([]*manifest.Part, set.Nodes)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(partReaders)
	for k := range set.Nodes {
		g.Go(func() error {
			p, err := GetPart(gctx, st, prefix, set, k)
			if err != nil {
				return fmt.Errorf("commit step %d: %w", set.Step, err)
			}
			parts[k] = p
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}
