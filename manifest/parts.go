package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// ErrNoPart is returned by GetPart when the node's part manifest is absent.
var ErrNoPart = errors.New("no part manifest for this node")

// ErrPartConflict is returned when a node's part manifest of a step is
// already written with different content.
var ErrPartConflict = errors.New("node part already written with different content")

// Part is the manifest of the files one node of a multi-node job holds for
// a step: the same entries as a Manifest, plus which node wrote it. A step
// of an N-node job is committed by merging the N parts into its manifest.
type Part struct {
	// Format is the format version, "major.minor".
	Format string `json:"format"`
	// Step is the training step.
	Step int64 `json:"step"`
	// NodeRank is the node that wrote the part, 0..Nodes-1.
	NodeRank int `json:"node_rank"`
	// Nodes is the number of nodes of the job.
	Nodes int `json:"nodes"`
	// Run is the job incarnation the part belongs to (PartSet.Run).
	Run string `json:"run,omitempty"`
	// Layout is the layout the node detected (Manifest.Layout).
	Layout string `json:"layout,omitempty"`
	// Created is when the part was written (UTC).
	Created time.Time `json:"created"`
	// Files lists the node's regular files.
	Files []File `json:"files"`
	// Symlinks lists the node's links inside the checkpoint.
	Symlinks []Symlink `json:"symlinks,omitempty"`
}

// Set returns the set the part belongs to.
func (p *Part) Set() PartSet { return PartSet{Step: p.Step, Nodes: p.Nodes, Run: p.Run} }

// asManifest views the part as a manifest, for validation and comparison.
func (p *Part) asManifest() *Manifest {
	return &Manifest{Format: p.Format, Step: p.Step, Created: p.Created, Files: p.Files, Symlinks: p.Symlinks}
}

// ValidatePart checks a part manifest as strictly as Validate checks a
// manifest, and its node fields.
func ValidatePart(p *Part, prefix string) error {
	if p.Nodes < 1 || p.Nodes > MaxNodes {
		return fmt.Errorf("part manifest field nodes: %d outside 1..%d", p.Nodes, MaxNodes)
	}
	if p.NodeRank < 0 || p.NodeRank >= p.Nodes {
		return fmt.Errorf("part manifest field node_rank: %d outside 0..%d", p.NodeRank, p.Nodes-1)
	}
	if err := CheckRun(p.Run); err != nil {
		return fmt.Errorf("part manifest field run: %w", err)
	}
	if err := Validate(p.asManifest(), prefix); err != nil {
		return fmt.Errorf("part manifest of node %d: %w", p.NodeRank, err)
	}
	return nil
}

// EncodePart returns the part as indented JSON with a trailing newline.
func EncodePart(p *Part) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode part manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// DecodePart parses and validates a part manifest.
func DecodePart(data []byte, prefix string) (*Part, error) {
	var probe struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("part manifest is not valid JSON: %w", err)
	}
	if err := checkFormat(probe.Format); err != nil {
		return nil, err
	}
	var p Part
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("part manifest is not valid JSON: %w", err)
	}
	if err := ValidatePart(&p, prefix); err != nil {
		return nil, err
	}
	return &p, nil
}

// GetPart reads and validates node nodeRank's part manifest of a set. It
// returns ErrNoPart if the part is absent.
func GetPart(ctx context.Context, st store.Store, prefix string, set PartSet, nodeRank int) (*Part, error) {
	key := PartKey(prefix, set, nodeRank)
	data, err := ReadObject(ctx, st, key)
	if errors.Is(err, store.ErrNotExist) {
		return nil, fmt.Errorf("%s, node %d: %w", set, nodeRank, ErrNoPart)
	}
	if err != nil {
		return nil, fmt.Errorf("read part manifest %s: %w", key, err)
	}
	p, err := DecodePart(data, prefix)
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
// changes nothing.
func PutPart(ctx context.Context, st store.Store, prefix string, p *Part) (stored *Part, written bool, err error) {
	if err := ValidatePart(p, prefix); err != nil {
		return nil, false, fmt.Errorf("step %d: refusing invalid part manifest: %w", p.Step, err)
	}
	data, err := EncodePart(p)
	if err != nil {
		return nil, false, err
	}
	key := PartKey(prefix, p.Set(), p.NodeRank)
	_, err = st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{
		IfNoneMatch: true,
		CRC32C:      store.CRC32C(data),
		ContentType: "application/json",
	})
	if err == nil {
		return p, true, nil
	}
	if !errors.Is(err, store.ErrPreconditionFailed) {
		return nil, false, fmt.Errorf("step %d: write part manifest %s: %w", p.Step, key, err)
	}
	prev, err := GetPart(ctx, st, prefix, p.Set(), p.NodeRank)
	if err != nil {
		return nil, false, fmt.Errorf("step %d: read the part manifest already there: %w", p.Step, err)
	}
	if !SameContent(prev.asManifest(), p.asManifest()) {
		return prev, false, fmt.Errorf("step %d node %d of %d: %w (the node's files differ from what it pushed before; see %s)",
			p.Step, p.NodeRank, p.Nodes, ErrPartConflict, key)
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
	data, err := io.ReadAll(io.LimitReader(rc, MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", key, MaxManifestSize)
	}
	return data, nil
}
