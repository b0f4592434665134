package remote

import (
	"context"
	"fmt"

	"github.com/ferrylabs/ferry/internal/store"
)

// CheckObjects verifies that every object named by every committed manifest
// under prefix exists with the size the manifest records (one HEAD per
// file). It is the invariant "no manifest points at a missing or short
// object", which tests of crashes and races assert.
func CheckObjects(ctx context.Context, st store.Store, prefix string) error {
	steps, err := Steps(ctx, st, prefix, 0)
	if err != nil {
		return err
	}
	for _, n := range steps {
		m, err := Get(ctx, st, prefix, n)
		if err != nil {
			return err
		}
		for _, f := range m.Files {
			info, err := st.Head(ctx, f.Key)
			if err != nil {
				return fmt.Errorf("step %d is committed but %s is missing: %w", n, f.Path, err)
			}
			if info.Size != f.Size {
				return fmt.Errorf("step %d is committed but %s is %d bytes, the manifest says %d", n, f.Path, info.Size, f.Size)
			}
		}
	}
	return nil
}
