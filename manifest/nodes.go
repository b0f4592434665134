package manifest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/store"
)

// Cross-node commit. A step of an N-node job is committed when every node's
// files are durable, and only then; the object store is the only thing the
// nodes share, so it carries the protocol:
//
//  1. Each node uploads its files, then writes its part manifest
//     P/parts/<step>/[run-<run>/]of-<N>/node-<K>.json with a create-only PUT
//     (an identical part already there counts as written).
//  2. It lists P/parts/<step>/[run-<run>/]of-<N>/ (one page per 1,000
//     nodes). Fewer than N parts: it is done, a later node commits.
//  3. All N present: it reads them, merges them deterministically (files
//     sorted by path, created = the latest part's) and writes the manifest
//     with a create-only PUT; a 412 with identical content is success.
//
// With read-after-write and list-after-write consistency (R2, S3), the node
// whose part PUT completes last lists after every other PUT has completed,
// so it sees all N parts: at least one node commits. Create-only PUTs make
// exactly one manifest, and since it is a function of the N parts alone, any
// node writes the same bytes. A node that stops between steps 1 and 3
// leaves the step uncommitted until it runs again: its part PUT then finds
// its identical part, and it lists and commits.
//
// The run separates incarnations of a job: a job restarted from step 1000
// re-saves step 1100, usually with other bytes, and must not complete a set
// with parts its previous incarnation left for 1100 (the merged checkpoint
// would mix ranks from two trainings). With a run identity per incarnation
// the sets never mix; without one, a node whose files differ from its own
// earlier part fails with ErrPartConflict, but a node that had not written
// one could complete the old set.

// partReaders bounds the part manifests read at once.
const partReaders = 16

// NodeCommit reports what CommitNodePart did.
type NodeCommit struct {
	// Part is the node's part as stored: the caller's, or an identical one
	// already there.
	Part *Part
	// PartWritten is false when an identical part was already stored: the
	// objects the caller uploaded for this attempt are then not referenced.
	PartWritten bool
	// Present is how many of the step's N parts the listing found.
	Present int
	// Manifest is the step's committed manifest once all parts are present
	// (written by this call or found), nil while parts are missing.
	Manifest *Manifest
	// Committed is true when this call wrote the manifest.
	Committed bool
}

// CommitNodePart writes a node's part manifest and commits the step if every
// node's part is then present. See the protocol above. A part already
// written with different content fails with ErrPartConflict; a step already
// committed with different content fails with ErrConflict.
func CommitNodePart(ctx context.Context, st store.Store, prefix string, p *Part) (NodeCommit, error) {
	stored, written, err := PutPart(ctx, st, prefix, p)
	if err != nil {
		return NodeCommit{Part: stored}, err
	}
	res := NodeCommit{Part: stored, PartWritten: written}
	res.Manifest, res.Committed, res.Present, err = CompleteStep(ctx, st, prefix, p.Set())
	if err == nil && res.Manifest != nil && !Contains(res.Manifest, p.asManifest()) {
		return res, fmt.Errorf("commit step %d: %w: it lacks or differs in files of node %d (compare with `ferry show --step %d`)",
			p.Step, ErrConflict, p.NodeRank, p.Step)
	}
	return res, err
}

// CompleteStep commits a step from the part manifests of a set if all N
// are present. It returns the committed manifest (nil while parts are
// missing), whether this call wrote it, and how many parts it found.
func CompleteStep(ctx context.Context, st store.Store, prefix string, set PartSet) (m *Manifest, committed bool, present int, err error) {
	step, nodes := set.Step, set.Nodes
	if nodes < 1 || nodes > MaxNodes {
		return nil, false, 0, fmt.Errorf("commit step %d: %d nodes outside 1..%d", step, nodes, MaxNodes)
	}
	if err := CheckRun(set.Run); err != nil {
		return nil, false, 0, fmt.Errorf("commit step %d: %w", step, err)
	}
	ranks, err := listParts(ctx, st, prefix, set)
	if err != nil {
		return nil, false, 0, err
	}
	if len(ranks) < nodes {
		return nil, false, len(ranks), nil
	}
	// Another node may have committed already (it saw the set first): one
	// HEAD then saves reading N parts.
	if _, err := st.Head(ctx, ManifestKey(prefix, step)); err == nil {
		m, err := Get(ctx, st, prefix, step)
		return m, false, nodes, err
	} else if !errors.Is(err, store.ErrNotExist) {
		return nil, false, nodes, fmt.Errorf("commit step %d: check for its manifest: %w", step, err)
	}
	parts, err := readParts(ctx, st, prefix, set)
	if err != nil {
		return nil, false, nodes, err
	}
	merged, err := MergeParts(parts)
	if err != nil {
		return nil, false, nodes, err
	}
	m, committed, err = Commit(ctx, st, prefix, merged)
	return m, committed, nodes, err
}

// listParts returns the node ranks whose parts of the set are present.
func listParts(ctx context.Context, st store.Store, prefix string, set PartSet) (map[int]bool, error) {
	ranks := map[int]bool{}
	lp := StepPartsPrefix(prefix, set)
	err := st.List(ctx, lp, "", 0, func(o store.ObjectInfo) error {
		if s, k, ok := ParsePartKey(prefix, o.Key); ok && s == set {
			ranks[k] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("commit step %d: list part manifests under %s: %w", set.Step, lp, err)
	}
	return ranks, nil
}

// readParts reads the N parts of a set, a few at a time.
func readParts(ctx context.Context, st store.Store, prefix string, set PartSet) ([]*Part, error) {
	parts := make([]*Part, set.Nodes)
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

// MergeParts builds the manifest of a step from all its nodes' parts. The
// result depends only on the parts' content, not on their order or on who
// merges: files and symlinks are sorted by path, created is the latest
// part's, nodes is N. A path held by several nodes is accepted when they
// agree on its content (shared files that every node writes, such as a
// config saved on each node) and taken from the lowest node rank; different
// content fails, naming both nodes.
func MergeParts(parts []*Part) (*Manifest, error) {
	if len(parts) == 0 {
		return nil, errors.New("merge parts: no parts")
	}
	sorted := append([]*Part(nil), parts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].NodeRank < sorted[j].NodeRank })
	first := sorted[0]
	m := &Manifest{Format: FormatVersion, Step: first.Step, Nodes: first.Nodes}
	type owned struct {
		node int
		file File
	}
	files := map[string]owned{}
	links := map[string]owned{}
	var created time.Time
	for i, p := range sorted {
		if p.Set() != first.Set() || p.NodeRank != i || p.Nodes != len(sorted) {
			return nil, fmt.Errorf("merge parts of %s: part %d is node %d of %s; want node %d of %d",
				first.Set(), i, p.NodeRank, p.Set(), i, len(sorted))
		}
		if p.Created.After(created) {
			created = p.Created
		}
		for _, f := range p.Files {
			if o, dup := files[f.Path]; dup {
				if o.file.Size != f.Size || o.file.BLAKE3 != f.BLAKE3 {
					return nil, fmt.Errorf("commit step %d: nodes %d and %d both hold %s with different content", p.Step, o.node, p.NodeRank, f.Path)
				}
				continue
			}
			files[f.Path] = owned{p.NodeRank, f}
			m.Files = append(m.Files, f)
		}
		for _, s := range p.Symlinks {
			if o, dup := links[s.Path]; dup {
				if o.file.Key != s.Target {
					return nil, fmt.Errorf("commit step %d: nodes %d and %d both hold link %s with different targets", p.Step, o.node, p.NodeRank, s.Path)
				}
				continue
			}
			links[s.Path] = owned{p.NodeRank, File{Key: s.Target}}
			m.Symlinks = append(m.Symlinks, s)
		}
	}
	m.Created = created
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	sort.Slice(m.Symlinks, func(i, j int) bool { return m.Symlinks[i].Path < m.Symlinks[j].Path })
	return m, nil
}
