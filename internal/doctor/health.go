package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/verify"
)

// DefaultStaleAfter is how old node parts of an uncommitted step, or a
// multipart upload, must be before Health warns of them: older than any
// one push of a step should take.
const DefaultStaleAfter = time.Hour

// Run is a run whose health doctor --from checks.
type Run struct {
	Store  store.Store
	Prefix string
	// URL names the run in fixes (s3://bucket/prefix).
	URL string
	// StaleAfter is when node parts of a step never committed, and a
	// multipart upload never finished, count as abandoned (default
	// DefaultStaleAfter).
	StaleAfter time.Duration
	// Now returns the current time (default time.Now), for tests.
	Now func() time.Time
}

// Health checks a run's state in the bucket: the newest restorable step
// (the cheap check: manifests validate, objects present with their sizes,
// damage records honoured), node parts of steps never committed, multipart
// uploads never finished, and damage records. It reads; it writes nothing.
func Health(ctx context.Context, r Run) []Result {
	if r.StaleAfter <= 0 {
		r.StaleAfter = DefaultStaleAfter
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	steps, err := remote.Steps(ctx, r.Store, r.Prefix, 0)
	if err != nil {
		return []Result{fail("newest restorable", "check --from and the credentials' read and list rights", "%s: %v", r.URL, err),
			skip("uncommitted parts", "the run cannot be listed"), skip("multipart uploads", "the run cannot be listed"),
			skip("damage records", "the run cannot be listed")}
	}
	return []Result{newestCheck(ctx, r, steps), partsCheck(ctx, r, steps), uploadsCheck(ctx, r), damageCheck(ctx, r)}
}

// newestCheck answers which step restore --on-damaged previous lands on.
func newestCheck(ctx context.Context, r Run, steps []int64) Result {
	const name = "newest restorable"
	if len(steps) == 0 {
		return warn(name, "check --from; the first commit of the agent or ferry push creates the run", "nothing is committed at %s yet", r.URL)
	}
	n, err := verify.NewestRestorable(ctx, verify.Options{Store: r.Store, Prefix: r.Prefix, Steps: steps})
	if err != nil {
		return fail(name, "", "%s: %v", r.URL, err)
	}
	var skipped []string
	for _, s := range n.Skipped {
		skipped = append(skipped, fmt.Sprintf("step %d skipped (%s)", s.Step, s.Reason))
	}
	verifyAll := fmt.Sprintf("ferry verify --from %s --newest-restorable --read-data", r.URL)
	switch {
	case !n.Found:
		return fail(name, "ferry verify --from "+r.URL+" --all lists every problem; push a good step again",
			"no committed step of %d is restorable: %s", len(steps), strings.Join(skipped, "; "))
	case len(skipped) > 0:
		return warn(name, fmt.Sprintf("restores with --on-damaged previous land on step %d; re-push or repair the newer ones "+
			"and clear their records (ferry verify --clear-damaged N); %s also reads the bytes", n.Step, verifyAll),
			"step %d, not the latest: %s", n.Step, strings.Join(skipped, "; "))
	}
	return ok(name, "step %d, the latest: its manifest validates and its %d files are present with their sizes "+
		"(bytes not read: %s reads them)", n.Step, n.Report.Files, verifyAll)
}

// partsCheck warns of node parts of steps never committed that are older
// than StaleAfter: a node that never pushed its share, or a job that died
// before the last node did.
func partsCheck(ctx context.Context, r Run, steps []int64) Result {
	const name = "uncommitted parts"
	sets, err := remote.PartSets(ctx, r.Store, r.Prefix)
	if err != nil {
		return fail(name, "", "%s: %v", r.URL, err)
	}
	var stale, young []string
	for _, s := range sets {
		if slices.Contains(steps, s.Set.Step) {
			continue
		}
		age := r.Now().Sub(s.Newest)
		desc := fmt.Sprintf("%s: parts of node ranks %v only, newest %s ago", s.Set, s.Ranks, age.Round(time.Second))
		if age >= r.StaleAfter {
			stale = append(stale, desc)
		} else {
			young = append(young, desc)
		}
	}
	if len(stale) > 0 {
		return warn(name, "the nodes missing never pushed their share: see their agents' logs (ferry status on each); "+
			"ferry prune drops such parts and their objects after --abandoned-after (default 7 days)",
			"%d %s never committed, older than %s: %s", len(stale), plural(len(stale), "step", "steps"), r.StaleAfter, strings.Join(stale, "; "))
	}
	if len(young) > 0 {
		return ok(name, "%d %s being committed: %s", len(young), plural(len(young), "step", "steps"), strings.Join(young, "; "))
	}
	return ok(name, "no node parts of a step never committed")
}

// uploadsCheck warns of multipart uploads under the run started more than
// StaleAfter ago and never finished: their parts are stored, and billed,
// until aborted.
func uploadsCheck(ctx context.Context, r Run) Result {
	const name = "multipart uploads"
	ups, err := r.Store.ListUploads(ctx, strings.TrimSuffix(r.Prefix, "/")+"/")
	if err != nil {
		return fail(name, "allow s3:ListBucketMultipartUploads on the bucket", "%s: %v", r.URL, err)
	}
	var stale []store.Upload
	for _, u := range ups {
		if r.Now().Sub(u.Initiated) >= r.StaleAfter {
			stale = append(stale, u)
		}
	}
	if len(stale) == 0 {
		return ok(name, "none unfinished older than %s (%d in progress)", r.StaleAfter, len(ups))
	}
	oldest := stale[0]
	for _, u := range stale {
		if u.Initiated.Before(oldest.Initiated) {
			oldest = u
		}
	}
	return warn(name, "an agent that restarts resumes its own; ferry prune --from "+r.URL+" --keep-last N aborts those older "+
		"than --abandoned-after (default 7 days), or set a lifecycle rule that aborts incomplete multipart uploads",
		"%d started over %s ago and never finished, their parts stored and billed (oldest %s, %s ago)",
		len(stale), r.StaleAfter, oldest.Key, r.Now().Sub(oldest.Initiated).Round(time.Second))
}

// damageCheck lists the steps recorded damaged.
func damageCheck(ctx context.Context, r Run) Result {
	const name = "damage records"
	damaged, err := remote.DamagedSteps(ctx, r.Store, r.Prefix)
	if err != nil {
		return fail(name, "", "%s: %v", r.URL, err)
	}
	if len(damaged) == 0 {
		return ok(name, "no step is recorded damaged")
	}
	var steps []int64
	for s := range damaged {
		steps = append(steps, s)
	}
	slices.Sort(steps)
	var ds []string
	for _, s := range steps {
		ds = append(ds, fmt.Sprintf("step %d (%s)", s, damaged[s].Reason))
	}
	return warn(name, "restores with --on-damaged previous skip these steps; once one is re-pushed or repaired, "+
		"ferry verify --from "+r.URL+" --clear-damaged N removes its record",
		"%d %s recorded damaged: %s", len(ds), plural(len(ds), "step", "steps"), strings.Join(ds, "; "))
}
