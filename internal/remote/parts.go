package remote

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// ErrNoPart is returned by GetPart when the node's part manifest is absent.
var ErrNoPart = errors.New("no part manifest for this node")

// ErrPartConflict is returned when a node's part manifest of a step is
// already written with different content.
var ErrPartConflict = errors.New("node part already written with different content")

// GetPart reads and validates node nodeRank's part manifest of a set. It
// returns ErrNoPart if the part is absent.
func GetPart(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, nodeRank int) (*manifest.Part, error) {
	key := manifest.PartKey(prefix, set, nodeRank)
	data, err := ReadObject(ctx, st, key)
	if errors.Is(err, store.ErrNotExist) {
		return nil, fmt.Errorf("%s, node %d: %w", set, nodeRank, ErrNoPart)
	}
	if err != nil {
		return nil, fmt.Errorf("read part manifest %s: %w", key, err)
	}
	p, err := manifest.DecodePart(data, prefix)
	if err != nil {
		return nil, fmt.Errorf("part manifest %s: %w", key, err)
	}
	if p.Set() != set || p.NodeRank != nodeRank {
		return nil, fmt.Errorf("part manifest %s: says %s, node %d, but its key says %s, node %d", key, p.Set(), p.NodeRank, set, nodeRank)
	}
	return p, nil
}

// PutPart writes a node's part manifest with a create-only conditional PUT.
// If an identical part (same files, sizes, hashes and symlinks) is already
// there, it returns that one and written=false: a node that re-runs a step
// after a crash succeeds. A different part fails with ErrPartConflict and
// changes nothing. It sets p.Format to the version p's content needs.
func PutPart(ctx context.Context, st store.Store, prefix string, p *manifest.Part) (stored *manifest.Part, written bool, err error) {
	p.Format = manifest.FormatFor(p.Format, p.Files)
	if err := manifest.ValidatePart(p, prefix); err != nil {
		return nil, false, fmt.Errorf("step %d: refusing invalid part manifest: %w", p.Step, err)
	}
	data, err := manifest.EncodePart(p)
	if err != nil {
		return nil, false, err
	}
	key := manifest.PartKey(prefix, p.Set(), p.NodeRank)
	var prev *manifest.Part
	created, err := createOnly(ctx, st, key, data, fmt.Sprintf("step %d: write part manifest %s", p.Step, key), func() (err error) {
		if prev, err = GetPart(ctx, st, prefix, p.Set(), p.NodeRank); err != nil {
			return fmt.Errorf("step %d: read the part manifest already there: %w", p.Step, err)
		}
		if !manifest.SameContent(prev.AsManifest(), p.AsManifest()) {
			return fmt.Errorf("step %d node %d of %d: %w (the node's files differ from what it pushed before; see %s)",
				p.Step, p.NodeRank, p.Nodes, ErrPartConflict, key)
		}
		return nil
	})
	switch {
	case err != nil:
		return prev, false, err
	case created:
		return p, true, nil
	}
	return prev, false, nil
}

// ReadObject reads a whole object of at most MaxManifestSize bytes: a
// manifest, a tombstone, a part manifest or a manifest shard.
func ReadObject(ctx context.Context, st store.Store, key string) ([]byte, error) {
	rc, err := st.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, manifest.MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > manifest.MaxManifestSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", key, manifest.MaxManifestSize)
	}
	return data, nil
}
