package remote

import (
	"context"
	"fmt"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// DataAfter returns the lowest step above step (any step when step is
// negative) that has objects under the data prefix, with one LIST of one
// key, and false when there is none. Objects of a step above the latest
// committed one are an upload in flight or left unfinished, or the objects
// of a step whose manifest was deleted: a restore says so, since it
// cannot tell which.
func DataAfter(ctx context.Context, st store.Store, prefix string, step int64) (int64, bool, error) {
	dp := manifest.DataPrefix(prefix)
	after := ""
	if step >= 0 {
		// Every key of the step is dp + its 12 digits + "/"..., and '/'
		// sorts before '0': the keys after this one are of later steps.
		after = dp + manifest.StepString(step) + "0"
	}
	found, ok := int64(-1), false
	err := st.List(ctx, dp, after, 1, func(o store.ObjectInfo) error {
		found, ok = manifest.StepFromDataKey(prefix, o.Key)
		return store.ErrStopList
	})
	if err != nil {
		return 0, false, fmt.Errorf("list the objects after step %d under %s: %w", step, dp, err)
	}
	return found, ok && found > step, nil
}
