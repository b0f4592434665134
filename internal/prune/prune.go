// Package prune applies a retention policy to a checkpoint prefix: it
// deletes the manifests of steps outside the policy, then the objects no
// kept manifest references, then leftovers (node parts, restore barrier
// check-ins, multipart uploads nobody finished).
//
// It never deletes an object that a kept manifest references, nor one a
// step still being uploaded needs, even while agents run, because:
//
//   - An object nothing references yet (an upload in flight, a node's files
//     before its part is written) is deleted only once it is older than
//     MinAge. Multipart objects appear at CompleteMultipartUpload, so this
//     holds when MinAge exceeds the longest push of one node.
//   - Objects referenced by a node part of a step not yet committed, and
//     every object under that step's data prefix, are kept until the step's
//     parts are older than AbandonedAfter (a node that never came back).
//   - A push may reference an object of the previous committed step
//     (deduplication) that prune is about to unreference. So a pruned
//     manifest is first copied to a tombstone (P/pruned/...), whose objects
//     stay until the tombstone is older than MinAge: a push that read the
//     manifest before it was pruned commits within MinAge, and from then on
//     its own manifest references the objects. Space is thus reclaimed one
//     MinAge after the manifest goes; a tombstone is also a way back (copy
//     it to manifests/ while its objects are still there).
//
// Plan reads the bucket and decides; Execute carries a plan out. A dry run
// prints the plan, which is exactly what Execute deletes on an unchanged
// bucket.
package prune

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
)

// Defaults for zero Options.
const (
	DefaultMinAge         = 24 * time.Hour
	DefaultAbandonedAfter = 7 * 24 * time.Hour
)

// Policy says which committed steps to keep.
type Policy struct {
	// KeepLast keeps the newest KeepLast restorable committed steps (at
	// least 1), and the steps recorded damaged among them: a damaged step
	// does not count, so the newest restorable one is always kept.
	KeepLast int
	// KeepEvery, when positive, also keeps every step divisible by it.
	KeepEvery int64
}

// Keeps reports whether the policy keeps step, with index restorable
// committed steps newer than it (0: none; steps recorded damaged are not
// counted).
func (p Policy) Keeps(step int64, index int) bool {
	return index < p.KeepLast || (p.KeepEvery > 0 && step%p.KeepEvery == 0)
}

// Options configure a prune.
type Options struct {
	Store  store.Store
	Prefix string
	Policy Policy
	// Hold lists steps kept whatever the policy and not counted towards
	// KeepLast: the agent's steps declared ahead of every step saved
	// (agent/retention_hold.go), which must neither be deleted nor push
	// a saved step out of the newest KeepLast. A held step not in the
	// bucket is ignored.
	Hold map[int64]bool
	// MinAge is the grace period: objects nothing references, and the
	// objects of pruned manifests, are deleted only once this old (default
	// DefaultMinAge). It must exceed the longest push of one node; a
	// negative value means 0, which is safe only when nothing is uploading.
	MinAge time.Duration
	// AbandonedAfter is when multipart uploads nobody finished are aborted,
	// and node parts of a step never committed are deleted with their
	// objects (default DefaultAbandonedAfter, R2's own default for uploads).
	AbandonedAfter time.Duration
	// Now returns the current time (default time.Now), for tests.
	Now    func() time.Time
	Logger *zap.Logger
}

func (o *Options) defaults() error {
	if o.Store == nil {
		return errors.New("prune: no store")
	}
	if o.Policy.KeepLast < 1 {
		return fmt.Errorf("prune: keep-last %d: at least the newest step must be kept", o.Policy.KeepLast)
	}
	if o.Policy.KeepEvery < 0 {
		return fmt.Errorf("prune: keep-every %d is negative", o.Policy.KeepEvery)
	}
	switch {
	case o.MinAge == 0:
		o.MinAge = DefaultMinAge
	case o.MinAge < 0:
		o.MinAge = 0
	}
	if o.AbandonedAfter <= 0 {
		o.AbandonedAfter = DefaultAbandonedAfter
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return nil
}

// Plan is what a prune deletes, in the order it deletes it.
type Plan struct {
	// Kept and Pruned are the committed steps kept and pruned, newest first.
	Kept   []int64 `json:"kept_steps"`
	Pruned []int64 `json:"pruned_steps"`
	// Tombstones are written (copies of the pruned manifests) before the
	// manifests are deleted.
	Tombstones []string `json:"tombstones_written"`
	// Manifests, Objects, ExpiredTombstones and Parts are deleted in this
	// order.
	Manifests         []string `json:"manifests"`
	Objects           []string `json:"objects"`
	ExpiredTombstones []string `json:"expired_tombstones"`
	Parts             []string `json:"parts"`
	// Checkins are the restore barrier's check-ins older than MinAge,
	// deleted after the parts.
	Checkins []string `json:"checkins"`
	// Uploads are aborted last.
	Uploads []store.Upload `json:"aborted_uploads"`
	// ObjectBytes is the size of Objects.
	ObjectBytes int64 `json:"object_bytes"`
	// Later is what the grace period (MinAge) keeps now and a prune run
	// after it deletes, on a bucket that does not change meanwhile: the
	// objects of pruned steps (Why "pruned"), then those nothing
	// references yet (Why "unreferenced"). It is deleted by no run before.
	Later []Deferred `json:"later"`

	tombstoneData map[string][]byte // tombstone key -> manifest bytes
}

// Deleted returns every key the plan deletes, in order (aborted uploads
// as "key (upload ID)").
func (p *Plan) Deleted() []string {
	var out []string
	out = append(out, p.Manifests...)
	out = append(out, p.Objects...)
	out = append(out, p.ExpiredTombstones...)
	out = append(out, p.Parts...)
	out = append(out, p.Checkins...)
	for _, u := range p.Uploads {
		out = append(out, fmt.Sprintf("%s (upload %s)", u.Key, u.UploadID))
	}
	return out
}

// Prune plans and executes in one call.
func Prune(ctx context.Context, opts Options) (*Plan, error) {
	p, err := MakePlan(ctx, opts)
	if err != nil {
		return nil, err
	}
	return p, Execute(ctx, opts, p)
}
