package remote

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// ErrNoCheckpoint is returned when no committed manifest exists (for the
// prefix, or for the step asked for).
var ErrNoCheckpoint = errors.New("no committed checkpoint found")

// ErrConflict is returned by Commit when the step is already committed with
// different content.
var ErrConflict = errors.New("step already committed with different content")

// ErrRefusedManifest is returned (wrapped) when ferry refuses to write a
// manifest it built because the validator refuses it: the same files give
// the same manifest again, so retrying cannot help. (ErrInvalidManifest is
// the reading side: what the bucket holds does not validate.)
var ErrRefusedManifest = errors.New("refusing invalid manifest")

// Commit writes m as the committed manifest of its step with a create-only
// conditional PUT. If the step is already committed with the same content
// (same files, sizes and hashes, same symlinks) it returns the existing
// manifest and committed=false; with different content it returns
// ErrConflict and changes nothing. It sets m.Format to the version m's
// content needs (manifest.FormatFor: 3.0 with packed files).
func Commit(ctx context.Context, st store.Store, prefix string, m *manifest.Manifest) (existing *manifest.Manifest, committed bool, err error) {
	m.Format = manifest.FormatFor(m.Format, m.Files)
	if err := manifest.Validate(m, prefix); err != nil {
		return nil, false, fmt.Errorf("commit step %d: %w: %w", m.Step, ErrRefusedManifest, err)
	}
	data, full, err := prepareManifest(ctx, st, prefix, m)
	if err != nil {
		return nil, false, fmt.Errorf("commit step %d: %w", m.Step, err)
	}
	key := manifest.ManifestKey(prefix, m.Step)
	var prev *manifest.Manifest
	created, err := createOnly(ctx, st, key, data, "write manifest "+key, func() (err error) {
		if prev, err = Get(ctx, st, prefix, m.Step); err != nil {
			return fmt.Errorf("read the manifest already there: %w", err)
		}
		if !manifest.SameContent(prev, m) {
			return fmt.Errorf("%w (compare with `ferry show --step %d`)", ErrConflict, m.Step)
		}
		return nil
	})
	switch {
	case err != nil:
		return prev, false, fmt.Errorf("commit step %d: %w", m.Step, err)
	case created:
		return full, true, nil
	}
	return prev, false, nil
}

// prepareManifest returns the document that commits m and the committed
// form: m itself, or, when one document cannot hold its files, m with
// the shards they were written to (written now, before the document).
func prepareManifest(ctx context.Context, st store.Store, prefix string, m *manifest.Manifest) (data []byte, committed *manifest.Manifest, err error) {
	doc := m
	if manifest.NeedsShards(m) {
		if doc, err = writeShards(ctx, st, prefix, m); err != nil {
			return nil, nil, err
		}
	}
	if data, err = manifest.Encode(doc); err != nil {
		return nil, nil, err
	}
	if doc == m {
		return data, m, nil
	}
	full := *m
	full.Format, full.Shards = doc.Format, doc.Shards
	return data, &full, nil
}

// Get reads and validates the committed manifest of a step, with the files
// of every shard if it is sharded. It returns ErrNoCheckpoint if the step
// is not committed.
func Get(ctx context.Context, st store.Store, prefix string, step int64) (*manifest.Manifest, error) {
	return GetFiltered(ctx, st, prefix, step, nil)
}

// GetFiltered is Get reading only the shards filter selects (all when nil)
// of a sharded manifest; see Resolve.
func GetFiltered(ctx context.Context, st store.Store, prefix string, step int64, filter manifest.ShardFilter) (*manifest.Manifest, error) {
	m, err := getHeader(ctx, st, prefix, step)
	if err != nil || !m.Sharded() {
		return m, err
	}
	return Resolve(ctx, st, prefix, m, filter)
}

// getHeader reads and validates the manifest document of a step.
func getHeader(ctx context.Context, st store.Store, prefix string, step int64) (*manifest.Manifest, error) {
	key := manifest.ManifestKey(prefix, step)
	data, err := ReadObject(ctx, st, key)
	if errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket) {
		return nil, fmt.Errorf("step %d: %w", step, ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	m, err := manifest.DecodeBytes(data, prefix)
	if err != nil {
		return nil, invalid(fmt.Errorf("manifest %s: %w", key, err))
	}
	if m.Step != step {
		return nil, invalid(fmt.Errorf("manifest %s: field step is %d, but its key says %d", key, m.Step, step))
	}
	return m, nil
}

// ErrInvalidManifest is wrapped by the errors of Get and GetFiltered when
// what the bucket holds for a committed step is not a valid manifest (or
// shard): the step is not restorable as recorded, and reading it again
// will not change that.
var ErrInvalidManifest = errors.New("manifest does not validate")

// invalidError marks err as ErrInvalidManifest without changing its text.
type invalidError struct{ err error }

func (e invalidError) Error() string   { return e.err.Error() }
func (e invalidError) Unwrap() []error { return []error{e.err, ErrInvalidManifest} }

func invalid(err error) error {
	if errors.Is(err, manifest.ErrNewerFormat) {
		return err // written by a newer ferry: not damaged
	}
	return invalidError{err}
}

// Steps lists committed steps, newest first. limit > 0 stops after that many.
func Steps(ctx context.Context, st store.Store, prefix string, limit int) ([]int64, error) {
	var steps []int64
	err := st.List(ctx, manifest.ManifestsPrefix(prefix), "", limit, func(o store.ObjectInfo) error {
		if step, ok := manifest.StepFromManifestKey(prefix, o.Key); ok {
			steps = append(steps, step)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list manifests under %s: %w", manifest.ManifestsPrefix(prefix), err)
	}
	return steps, nil
}

// LatestStep returns the highest committed step with one listing request, or
// ErrNoCheckpoint.
func LatestStep(ctx context.Context, st store.Store, prefix string) (int64, error) {
	var first string
	steps, err := Steps(ctx, st, prefix, 1)
	if err != nil {
		return 0, err
	}
	if len(steps) == 1 {
		return steps[0], nil
	}
	// The first key was not a manifest (a stray object under manifests/,
	// which sorts before real keys only if it is odd): list them all.
	_ = st.List(ctx, manifest.ManifestsPrefix(prefix), "", 1, func(o store.ObjectInfo) error { first = o.Key; return nil })
	if first != "" {
		if steps, err = Steps(ctx, st, prefix, 0); err != nil {
			return 0, err
		}
		if len(steps) > 0 {
			return steps[0], nil
		}
	}
	return 0, ErrNoCheckpoint
}

// Latest reads the manifest of the highest committed step, or returns
// ErrNoCheckpoint.
func Latest(ctx context.Context, st store.Store, prefix string) (*manifest.Manifest, error) {
	step, err := LatestStep(ctx, st, prefix)
	if err != nil {
		return nil, err
	}
	return Get(ctx, st, prefix, step)
}

// StepAtOrBefore returns the newest committed step not after step, or
// ErrNoCheckpoint, with one LIST of one key: a push learns with one request
// whether its step is committed and, if not, which step to deduplicate
// against.
func StepAtOrBefore(ctx context.Context, st store.Store, prefix string, step int64) (int64, error) {
	// Keys of newer steps sort before this bare inverse number, and the
	// step's own key right after it.
	after := manifest.ManifestsPrefix(prefix) + fmt.Sprintf("%012d", manifest.MaxStep-step)
	found, stray := int64(-1), false
	try := func(maxKeys int) error {
		return st.List(ctx, manifest.ManifestsPrefix(prefix), after, maxKeys, func(o store.ObjectInfo) error {
			if s, ok := manifest.StepFromManifestKey(prefix, o.Key); ok && s <= step {
				found = s
				return store.ErrStopList
			}
			stray = true
			return nil
		})
	}
	if err := try(1); err != nil {
		return 0, fmt.Errorf("list manifests under %s: %w", manifest.ManifestsPrefix(prefix), err)
	}
	if found < 0 && stray {
		// A stray object sorted first: look further.
		if err := try(0); err != nil {
			return 0, fmt.Errorf("list manifests under %s: %w", manifest.ManifestsPrefix(prefix), err)
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("at or before step %d: %w", step, ErrNoCheckpoint)
	}
	return found, nil
}
