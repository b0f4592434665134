package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/manifest"
)

// find reads the manifest asked for. The decoder has validated it. With
// ranks selected, a sharded manifest's shards of other ranks are not read.
// It also returns the shortest of its single requests' times (the LIST of
// the latest step, the GET of a manifest that is not sharded; 0 with none):
// the round trip to the store, at most.
func find(ctx context.Context, opts Options) (*manifest.Manifest, time.Duration, error) {
	var filter manifest.ShardFilter
	if opts.Ranks != nil {
		filter = manifest.RanksFilter(opts.Ranks)
	}
	step := opts.Step
	var rtt time.Duration
	start := time.Now()
	m, err := remote.GetFiltered(ctx, opts.Store, opts.Prefix, step, filter)
	if err != nil {
		return nil, 0, fmt.Errorf("restore step %d: %w", step, err)
	}
	if d := time.Since(start); !m.Sharded() && (rtt == 0 || d < rtt) {
		rtt = d // one GET; a sharded one is more
	}
	return m, rtt, nil
}
