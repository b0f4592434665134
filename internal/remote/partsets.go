package remote

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// PartSetInfo is a set of node parts in the bucket: which nodes wrote
// theirs, and when the newest was written.
type PartSetInfo struct {
	Set    manifest.PartSet
	Ranks  []int
	Newest time.Time
}

// PartSets lists the node part sets under prefix (one LIST), in the order
// listed; commit markers are not parts and are left out.
func PartSets(ctx context.Context, st store.Store, prefix string) ([]PartSetInfo, error) {
	var out []PartSetInfo
	index := map[manifest.PartSet]int{}
	err := st.List(ctx, manifest.PartsPrefix(prefix), "", 0, func(o store.ObjectInfo) error {
		set, rank, ok := manifest.ParsePartKey(prefix, o.Key)
		if !ok {
			return nil
		}
		i, seen := index[set]
		if !seen {
			i = len(out)
			index[set] = i
			out = append(out, PartSetInfo{Set: set})
		}
		out[i].Ranks = append(out[i].Ranks, rank)
		if o.LastModified.After(out[i].Newest) {
			out[i].Newest = o.LastModified
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list node parts under %s: %w", manifest.PartsPrefix(prefix), err)
	}
	return out, nil
}
