package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/verify"
	"github.com/ferrylabs/ferry/manifest"
)

// damageMark is what verify --mark-damaged did for one damaged step.
type damageMark struct {
	Step int64 `json:"step"`
	// Record is "recorded damaged", "already recorded damaged", or "not
	// recorded: ..." with why.
	Record string `json:"record"`
}

// markDamaged records each step of reps with a problem that proves damage
// (not a read that failed) in the bucket, create-only.
func markDamaged(ctx context.Context, st store.Store, loc manifest.Location, reps []verify.StepReport) []damageMark {
	var out []damageMark
	for _, r := range reps {
		p, ok := damageOf(r)
		if !ok {
			continue
		}
		d := remote.Damage{Step: r.Step, Path: p.Path, Key: p.Key, Reason: p.String(), By: recordBy("verify"), At: time.Now().UTC()}
		created, err := remote.RecordDamage(ctx, st, loc.Prefix, d)
		m := damageMark{Step: r.Step, Record: "recorded damaged"}
		switch {
		case err != nil:
			m.Record = "not recorded: " + err.Error()
		case !created:
			m.Record = "already recorded damaged"
		}
		out = append(out, m)
	}
	return out
}

// damageOf returns the first problem of r that shows the step damaged.
func damageOf(r verify.StepReport) (verify.Problem, bool) {
	for _, p := range r.Problems {
		if p.Kind != verify.Unreadable {
			return p, true
		}
	}
	return verify.Problem{}, false
}

// clearDamaged removes the record that step is damaged.
func clearDamaged(ctx context.Context, st store.Store, loc manifest.Location, step int64, w io.Writer) error {
	had, err := remote.ClearDamage(ctx, st, loc.Prefix, step)
	if err != nil {
		return fmt.Errorf("verify %s: %w", loc, err)
	}
	if !had {
		fmt.Fprintf(w, "step %d: no damage record to clear\n", step)
		return nil
	}
	fmt.Fprintf(w, "step %d: damage record cleared; restores of the latest step read it again\n", step)
	return nil
}
