package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
)

// stateOwner names a push in its resume state.
func stateOwner(location string, step int64, nodes, nodeRank int) string {
	if nodes > 1 {
		return fmt.Sprintf("%s step %d node %d of %d", location, step, nodeRank, nodes)
	}
	return fmt.Sprintf("%s step %d", location, step)
}

// statePath is the resume state file of a push.
func statePath(dir, owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return filepath.Join(dir, "push-"+hex.EncodeToString(sum[:8])+".json")
}

// Destination is where one node's pushes go and where their resume state
// lives: Push sends a step there, Abandon discards an unfinished push.
type Destination struct {
	Store store.Store
	// Location names the destination (s3://bucket/prefix) in resume state,
	// so that state from another destination is never reused.
	Location string
	Prefix   string
	// StateDir holds the resume state of pushes; empty disables resuming.
	StateDir string
	// Nodes is the number of nodes of the job and NodeRank this node's
	// (0..Nodes-1). With more than one node, a push writes this node's
	// part manifest and the step is committed once every node's part is
	// there (remote.CommitNodePart); 0 or 1 commits the manifest directly.
	Nodes, NodeRank int
	// Run identifies this incarnation of a multi-node job (see
	// manifest.PartSet): parts of different runs never complete a step
	// together. Empty when the job has no run identity.
	Run    string
	Logger *zap.Logger
}

// Abandon discards an unfinished push of a step by this node: it aborts
// the multipart uploads its resume state records and deletes the objects
// it completed, then removes the state. Nothing committed is touched: a
// push's objects are its own attempt's. No state means nothing to do.
func (d Destination) Abandon(ctx context.Context, step int64) error {
	log := d.Logger
	if log == nil {
		log = zap.NewNop()
	}
	st := d.Store
	owner := stateOwner(d.Location, step, d.Nodes, d.NodeRank)
	path := statePath(d.StateDir, owner)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	state, err := openResumeState(path, owner, func() string { return "" })
	if err != nil {
		return fmt.Errorf("abandon step %d: %w", step, err)
	}
	var firstErr error
	for key, up := range state.Uploads() {
		if err := st.AbortMultipart(ctx, key, up.UploadID); err != nil && !errors.Is(err, store.ErrNotExist) && firstErr == nil {
			firstErr = fmt.Errorf("abandon step %d: abort upload of %s: %w", step, key, err)
		}
	}
	for key := range state.DoneObjects() {
		if err := st.Delete(ctx, key); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("abandon step %d: delete %s: %w", step, key, err)
		}
	}
	if firstErr != nil {
		return firstErr
	}
	log.Info("abandoned unfinished upload", zap.Int64("step", step), zap.Int("multipart_aborted", len(state.Uploads())), zap.Int("objects_deleted", len(state.DoneObjects())))
	return state.Delete()
}
