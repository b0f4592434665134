package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// reviseTries bounds how often Revise reads the manifest again after
// another writer replaced it between its read and its write.
const reviseTries = 8

// Revise replaces the committed manifest of a step with its next
// revision: next(current) builds it from the manifest committed now, and
// the result is written over the same key with If-Match on the ETag read,
// so a writer that replaced it meanwhile is never overwritten (Revise
// reads again and calls next again). The revision keeps the step's key,
// so list, restore, dedup and prune, and readers that predate revisions,
// take it at once; the objects only the earlier version referenced stay in
// place for readers that already hold it, and go when prune removes the
// step.
//
// It returns the manifest now committed and whether this call wrote it:
// when next returns a manifest with the same content as the current one,
// nothing is written. A step that is not committed gives ErrNoCheckpoint.
func Revise(ctx context.Context, st store.Store, prefix string, step int64, next func(current *manifest.Manifest) (*manifest.Manifest, error)) (*manifest.Manifest, bool, error) {
	key := manifest.ManifestKey(prefix, step)
	for try := 0; ; try++ {
		info, err := st.Head(ctx, key)
		if errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket) {
			return nil, false, fmt.Errorf("revise step %d: %w", step, ErrNoCheckpoint)
		}
		if err != nil {
			return nil, false, fmt.Errorf("revise step %d: head %s: %w", step, key, err)
		}
		cur, err := Get(ctx, st, prefix, step)
		if err != nil {
			return nil, false, fmt.Errorf("revise step %d: %w", step, err)
		}
		m, err := next(cur)
		if err != nil {
			return nil, false, fmt.Errorf("revise step %d: %w", step, err)
		}
		if manifest.SameContent(cur, m) {
			return cur, false, nil
		}
		m.Revision = cur.Revision + 1
		written, err := replace(ctx, st, prefix, info.ETag, m)
		if err == nil {
			return written, true, nil
		}
		if !errors.Is(err, store.ErrPreconditionFailed) || try+1 >= reviseTries {
			return nil, false, fmt.Errorf("revise step %d: %w", step, err)
		}
	}
}

// replace writes m over its step's manifest, if that still has etag.
func replace(ctx context.Context, st store.Store, prefix, etag string, m *manifest.Manifest) (*manifest.Manifest, error) {
	m.Format, m.Shards = manifest.FormatFor(manifest.FormatVersion, m.Files), nil
	m.Created = time.Now().UTC().Truncate(time.Millisecond)
	if err := manifest.Validate(m, prefix); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefusedManifest, err)
	}
	data, full, err := prepareManifest(ctx, st, prefix, m)
	if err != nil {
		return nil, err
	}
	key := manifest.ManifestKey(prefix, m.Step)
	if _, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{
		IfMatch: etag, CRC32C: store.CRC32C(data), ContentType: "application/json"}); err != nil {
		return nil, fmt.Errorf("write manifest %s: %w", key, err)
	}
	return full, nil
}
