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

func stateOwner(location string, step int64, nodes, nodeRank int) string {
	if nodes > 1 {
		return fmt.Sprintf("%s step %d node %d of %d", location, step, nodeRank, nodes)
	}
	return fmt.Sprintf("%s step %d", location, step)
}

func statePath(dir, owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return filepath.Join(dir, "push-"+hex.EncodeToString(sum[:8])+".json")
}

func Abandon(ctx context.Context, st store.Store, stateDir, location, prefix string, step int64, log *zap.Logger) error {
	return AbandonNode(ctx, st, stateDir, location, prefix, step, 1, 0, log)
}

func AbandonNode(ctx context.Context, st store.Store, stateDir, location, prefix string, step int64, nodes, nodeRank int, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	owner := stateOwner(location, step, nodes, nodeRank)
	path := statePath(stateDir, owner)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	state, err := OpenState(path, owner, func() string { return "" })
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
