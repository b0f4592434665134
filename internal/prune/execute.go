package prune

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// deleters bounds the delete requests in flight.
const deleters = 16

// Execute carries out a plan from MakePlan with the same options: it writes
// the tombstones, then deletes manifests, objects, expired tombstones,
// parts and restore check-ins, then aborts the uploads, each stage
// finished before the next starts. It stops at the first error; running prune again finishes the
// job (every stage is idempotent).
func Execute(ctx context.Context, opts Options, p *Plan) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	log := opts.Logger
	logPlan(log, p, false)
	st := opts.Store
	// A tombstone is written before its manifest is deleted, so the
	// pruned manifest's objects are never unprotected. With no grace
	// period there are no tombstones.
	if len(p.Tombstones) != 0 && len(p.Tombstones) != len(p.Manifests) {
		return errors.New("prune: plan has tombstones for some pruned manifests only (make plans with MakePlan)")
	}
	for i := range p.Manifests {
		if len(p.Tombstones) != 0 {
			key := p.Tombstones[i]
			data := p.tombstoneData[key]
			if data == nil {
				return fmt.Errorf("prune: plan has no content for tombstone %s (make plans with MakePlan)", key)
			}
			if _, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{CRC32C: store.CRC32C(data), ContentType: "application/json"}); err != nil {
				return fmt.Errorf("prune step %d: write tombstone %s: %w", p.Pruned[i], key, err)
			}
		}
		if err := st.Delete(ctx, p.Manifests[i]); err != nil {
			return fmt.Errorf("prune step %d: delete manifest %s: %w", p.Pruned[i], p.Manifests[i], err)
		}
		log.Debug("pruned step", zap.Int64("step", p.Pruned[i]))
	}
	// A set's commit markers go before its parts: a prune that stops in
	// between must not leave a done marker for parts pushed again.
	var markers, parts []string
	for _, k := range p.Parts {
		if _, ok := manifest.ParseMarkerKey(opts.Prefix, k); ok {
			markers = append(markers, k)
		} else {
			parts = append(parts, k)
		}
	}
	for _, stage := range []struct {
		what string
		keys []string
	}{{"object", p.Objects}, {"expired tombstone", p.ExpiredTombstones}, {"commit marker", markers}, {"node part", parts}, {"restore check-in", p.Checkins}} {
		if err := deleteAll(ctx, st, stage.what, stage.keys); err != nil {
			return err
		}
	}
	for _, u := range p.Uploads {
		if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil && !errors.Is(err, store.ErrNotExist) {
			return fmt.Errorf("prune: abort multipart upload of %s: %w", u.Key, err)
		}
	}
	return nil
}

func deleteAll(ctx context.Context, st store.Store, what string, keys []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(deleters)
	for _, key := range keys {
		g.Go(func() error {
			if err := st.Delete(gctx, key); err != nil {
				return fmt.Errorf("prune: delete %s %s: %w", what, key, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// LogPlan logs a summary of a plan that will not be executed (a dry run).
func LogPlan(log *zap.Logger, p *Plan) { logPlan(log, p, true) }
