package prune

import (
	"context"
	"fmt"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// checkins deletes the restore barrier's check-ins (P/checkins/...,
// manifest.RestoreCheckinKey) older than MinAge. A check-in only matters
// while the nodes of one start of a job restore together, minutes at
// most; after that nothing reads it. Young ones stay: a restore may be
// waiting on them now.
func (pl *planner) checkins(ctx context.Context, p *Plan) error {
	st, prefix := pl.opts.Store, pl.opts.Prefix
	err := st.List(ctx, manifest.CheckinsPrefix(prefix), "", 0, func(o store.ObjectInfo) error {
		if _, _, ok := manifest.ParseCheckinKey(prefix, o.Key); ok && pl.now.Sub(o.LastModified) >= pl.opts.MinAge {
			p.Checkins = append(p.Checkins, o.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune: list restore check-ins: %w", err)
	}
	return nil
}
