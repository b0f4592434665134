package restore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// ErrDamaged is wrapped by the error of a restore that found its step not
// restorable as recorded: an object missing, bytes that still do not
// match the manifest's BLAKE3 after a second download, an object shorter
// or longer than recorded, a manifest (or shard) that does not validate,
// or a step recorded damaged in the bucket. Downloading again will not
// help; an older step may (Options.Fallback).
var ErrDamaged = errors.New("step is damaged")

// DamagedError says which step is damaged and where.
type DamagedError struct {
	Step int64
	// Path is the damaged file's manifest path and Key its object; for a
	// manifest that does not validate Path is empty and Key the manifest's.
	Path, Key string
	// Recorded is set when the bucket records the step damaged: it was
	// skipped for that record without reading it, or, with Meanwhile,
	// the record was written by another restore while this one read the
	// step (crosscheck.go).
	Recorded, Meanwhile bool
	Err                 error
}

func (e *DamagedError) Error() string   { return e.Err.Error() }
func (e *DamagedError) Unwrap() []error { return []error{e.Err, ErrDamaged} }

// Skipped is a damaged step a restore did not restore.
type Skipped struct {
	Step int64 `json:"step"`
	// Path is the damaged file (empty: the manifest), Key its object.
	Path string `json:"path,omitempty"`
	Key  string `json:"key,omitempty"`
	// Reason is what was wrong.
	Reason string `json:"reason"`
	// Record says what became of the bucket's record of the damage:
	// "recorded" (by this restore), "recorded before" (by an earlier
	// restore or verify, so the step was not read), "already recorded"
	// (another node wrote it first, or wrote it while this restore read
	// the step, which it then did not place), or "not recorded: ..." with
	// why (read-only credentials, say).
	Record string `json:"record"`
}

// isDamage reports whether a file's restore failed for what the bucket
// holds rather than for the network or the local disk.
func isDamage(err error) bool {
	var werr *writeError
	switch {
	case errors.As(err, &werr):
		return false
	case errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket):
		return true
	}
	return errors.Is(err, ErrHashMismatch) || errors.Is(err, errTooLong) || errors.Is(err, errShort)
}

// asDamage wraps a file's error in a DamagedError when it is damage.
func asDamage(job *fileJob, err error) error {
	if err == nil || !isDamage(err) {
		return err
	}
	return &DamagedError{Path: job.file.Path, Key: job.file.Key, Err: err}
}

// manifestDamage wraps find's error in a DamagedError when the manifest
// does not validate.
func manifestDamage(prefix string, step int64, err error) error {
	if !errors.Is(err, remote.ErrInvalidManifest) {
		return err
	}
	return &DamagedError{Step: step, Key: manifest.ManifestKey(prefix, step), Err: err}
}

// recordDamage writes the bucket's record of de (create-only) unless
// Options.NoRecord, and describes the step skipped.
func recordDamage(ctx context.Context, opts Options, de *DamagedError) Skipped {
	s := Skipped{Step: de.Step, Path: de.Path, Key: de.Key, Reason: de.Err.Error()}
	if opts.NoRecord {
		s.Record = "not recorded: recording is off"
		return s
	}
	d := remote.Damage{Step: de.Step, Path: de.Path, Key: de.Key, Reason: s.Reason, By: opts.RecordBy, At: time.Now().UTC()}
	created, err := remote.RecordDamage(ctx, opts.Store, opts.Prefix, d)
	switch {
	case err != nil:
		s.Record = "not recorded: " + err.Error()
		opts.Logger.Warn("could not record the damaged step in the bucket; other nodes will find the damage themselves",
			zap.Int64("step", de.Step), zap.Error(err))
	case created:
		s.Record = "recorded"
	default:
		s.Record = "already recorded"
	}
	return s
}

// restoreLatest restores the latest committed step; with Options.Fallback
// it goes on, newest first, past damaged steps (recorded in the bucket, or
// found damaged and then recorded) to the newest restorable one. Each step
// after the latest costs one LIST of one key. Beside it, one more LIST of
// one key looks for objects of a step above the latest (newerData).
func restoreLatest(ctx context.Context, opts Options, growBudget bool) (res Result, err error) {
	step, err := remote.LatestStep(ctx, opts.Store, opts.Prefix)
	none := errors.Is(err, remote.ErrNoCheckpoint)
	if err != nil && !none {
		return Result{}, fmt.Errorf("restore latest step under %q: %w", opts.Prefix, err)
	}
	from := step
	if none {
		from = -1
	}
	newer := make(chan int64, 1)
	o := opts // the loop below changes opts
	go func() { newer <- newerData(ctx, o, from) }()
	defer func() { res.NewerData = <-newer }()
	if none {
		return Result{}, fmt.Errorf("restore latest step under %q: %w", opts.Prefix, err)
	}
	damaged, err := remote.DamagedSteps(ctx, opts.Store, opts.Prefix)
	if err != nil {
		opts.Logger.Warn("could not read the bucket's records of damaged steps; restoring as if there were none", zap.Error(err))
	}
	var skipped []Skipped
	opts.Peers = joinOnce(opts)
	for {
		res, err := restoreUnlessRecorded(ctx, opts, step, damaged, growBudget)
		var de *DamagedError
		if !errors.As(err, &de) {
			res.Skipped = skipped
			return res, err
		}
		s := Skipped{Step: de.Step, Path: de.Path, Key: de.Key, Reason: de.Err.Error(), Record: "recorded before"}
		switch {
		case de.Meanwhile:
			s.Record = "already recorded"
		case !de.Recorded:
			s = recordDamage(ctx, opts, de)
		}
		skipped = append(skipped, s)
		opts.Logger.Warn("step is damaged: skipping it", zap.Int64("step", s.Step), zap.String("path", s.Path),
			zap.String("key", s.Key), zap.String("reason", s.Reason), zap.String("record", s.Record), zap.Bool("fallback", opts.Fallback))
		if !opts.Fallback {
			res.Skipped = skipped
			return res, err
		}
		step, err = remote.StepAtOrBefore(ctx, opts.Store, opts.Prefix, step-1)
		if step < 0 || errors.Is(err, remote.ErrNoCheckpoint) {
			return Result{Step: -1, Skipped: skipped}, fmt.Errorf("restore under %q: no committed step is restorable (%d skipped): %w", opts.Prefix, len(skipped), ErrDamaged)
		}
		if err != nil {
			return Result{Step: -1, Skipped: skipped}, fmt.Errorf("restore under %q: find the step before %d: %w", opts.Prefix, s.Step, err)
		}
	}
}

// joinOnce returns opts.Peers for the first step that gets as far as the
// download, and the bucket alone for any step tried after it: a node joins
// its peers for one step (peer.Node.Join), and a step found damaged after
// the join leaves the fallback to the bucket. Every byte is still
// verified; only the sharing of ranges is lost.
func joinOnce(opts Options) func(context.Context, PeerRequest) (store.Store, error) {
	join := opts.Peers
	if join == nil {
		return nil
	}
	var joined bool
	return func(ctx context.Context, req PeerRequest) (store.Store, error) {
		if joined {
			opts.Logger.Warn("restoring this step from the bucket alone: this node joined its peers for a newer step, found damaged",
				zap.Int64("step", req.Step))
			return opts.Store, nil
		}
		joined = true
		return join(ctx, req)
	}
}

// restoreUnlessRecorded restores step, or fails with a DamagedError
// without reading it when the bucket records it damaged.
func restoreUnlessRecorded(ctx context.Context, opts Options, step int64, damaged map[int64]remote.Damage, growBudget bool) (Result, error) {
	if d, ok := damaged[step]; ok {
		err := fmt.Errorf("step %d is recorded damaged in the bucket (%s): %s", step, manifest.DamagedKey(opts.Prefix, step), d.Reason)
		return Result{Step: step}, &DamagedError{Step: step, Path: d.Path, Key: d.Key, Recorded: true, Err: err}
	}
	opts.Step, opts.latest = step, true
	return restoreStep(ctx, opts, growBudget)
}

// newerData warns when a step above latest (-1: none committed) has
// objects but no manifest, and returns that step (0: none). It is only a
// warning, not damage: an upload in flight, or one a stopped job left
// unfinished, looks the same as the objects of a deleted manifest.
func newerData(ctx context.Context, opts Options, latest int64) int64 {
	step, ok, err := remote.DataAfter(ctx, opts.Store, opts.Prefix, latest)
	switch {
	case err != nil:
		opts.Logger.Debug("could not look for objects of steps newer than the latest committed one", zap.Error(err))
		return 0
	case !ok:
		return 0
	}
	opts.Logger.Warn(fmt.Sprintf("objects of step %d exist without a manifest: an upload in flight or left unfinished by a stopped job, or a deleted manifest", step),
		zap.Int64("step", step), zap.Int64("latest_committed", latest), zap.String("objects", manifest.DataPrefix(opts.Prefix)+manifest.StepString(step)+"/"))
	return step
}
