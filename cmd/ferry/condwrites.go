package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/storecheck"
	"github.com/ferrylabs/ferry/manifest"
)

// Before its first commit to a destination, push, the agent and copy prove
// that the store refuses a second create-only PUT and a stale If-Match
// (internal/storecheck): a store that ignores them would let a committed
// step be overwritten. The proof is kept per endpoint and bucket in the
// state dir's stores/ folder for storecheck.MaxAge, so a store is checked
// once, not per push; copy, which has no --state-dir, uses the default
// state dir ($FERRY_STATE_DIR, $XDG_STATE_HOME/ferry, ~/.local/state/ferry).

const unsafeConditionalFlag = "unsafe-unconditional"

// conditionalWritesFlag is the override of push, the agent and copy.
func conditionalWritesFlag() cli.Flag {
	return &cli.BoolFlag{Name: unsafeConditionalFlag, EnvVars: []string{"FERRY_UNSAFE_UNCONDITIONAL"},
		Usage: "write to a store that ignores conditional writes (If-None-Match, If-Match), with a warning instead of refusing: " +
			"safe only while one writer alone ever writes the prefix; never with --nodes above 1"}
}

// storesDir is where the proofs are kept under a base state dir.
func storesDir(base string) string { return filepath.Join(base, "stores") }

// storeTarget names loc's store for storecheck: a folder is its own
// endpoint, file://.
func storeTarget(o remoteOptions, loc manifest.Location) storecheck.Target {
	if loc.IsFile() {
		return storecheck.Target{Endpoint: storecheck.FileEndpoint, Bucket: loc.Bucket, Prefix: loc.Prefix}
	}
	return storecheck.Target{Endpoint: s3store.ResolveEndpoint(o.Endpoint), Bucket: loc.Bucket, Prefix: loc.Prefix}
}

// proveConditionalWrites runs the check on st, the command's store of loc,
// unless base's cache holds a proof. A store that fails it is refused, or
// with unsafe a warning is logged and the command goes on. The check's
// requests stay out of the command's request counts: on the S3 store's
// own connections with an uncounted context, on a folder through a store
// of its own.
func proveConditionalWrites(ctx context.Context, st store.Store, o remoteOptions, loc manifest.Location, base string, unsafe bool, nodes int, log *zap.Logger) error {
	if unsafe && nodes > 1 {
		return usagef("--%s with %d nodes: the nodes of a job agree on who commits a step with create-only writes; it needs a store that enforces them",
			unsafeConditionalFlag, nodes)
	}
	if _, ok := st.(*s3store.Store); ok {
		ctx = s3store.Uncounted(ctx)
	} else {
		var err error
		if st, err = openLocation(ctx, o, loc, log, 2, nil); err != nil {
			return err
		}
	}
	target := storeTarget(o, loc)
	_, err := storecheck.Ensure(ctx, st, target, storecheck.Cache{Dir: storesDir(base)}, log)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, storecheck.ErrNotEnforced):
		return err
	case unsafe:
		log.Warn("writing anyway (--"+unsafeConditionalFlag+"): nothing stops two writers of one step from replacing each other's commit",
			zap.String("check", err.Error()))
		return nil
	}
	return fmt.Errorf("%w; nothing was written: use a store that enforces conditional writes (docs/compatibility.md), "+
		"or pass --%s if one writer alone ever writes %s", err, unsafeConditionalFlag, loc)
}
