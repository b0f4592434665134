package prune

import (
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// Reasons an object is deleted later (Deferred.Why).
const (
	// LaterPruned: an object of a pruned step, kept while a tombstone that
	// references it is younger than MinAge (a push that read the manifest
	// before it was pruned may still reference it).
	LaterPruned = "pruned"
	// LaterUnreferenced: an object nothing references, younger than MinAge
	// (an upload in flight, or one that failed and will not commit).
	LaterUnreferenced = "unreferenced"
)

// Deferred is a group of objects the grace period keeps now: a prune run
// from From deletes the first of them, one from Until all of them.
type Deferred struct {
	Why     string    `json:"why"`
	Objects int       `json:"objects"`
	Bytes   int64     `json:"bytes"`
	From    time.Time `json:"from"`
	Until   time.Time `json:"until"`
}

// later adds o to p.Later if the grace period alone keeps it, and reports
// whether it does; false means it is deletable now.
func (pl *planner) later(p *Plan, o store.ObjectInfo) bool {
	why, at := LaterPruned, pl.graced[o.Key]
	if young := o.LastModified.Add(pl.opts.MinAge); pl.now.Before(young) {
		if at.IsZero() {
			why = LaterUnreferenced
		}
		if young.After(at) {
			at = young
		}
	}
	if at.IsZero() || !pl.now.Before(at) {
		return false
	}
	i := 0
	for i < len(p.Later) && p.Later[i].Why != why {
		i++
	}
	if i == len(p.Later) {
		p.Later = append(p.Later, Deferred{Why: why, From: at, Until: at})
	}
	d := &p.Later[i]
	d.Objects++
	d.Bytes += o.Size
	if at.Before(d.From) {
		d.From = at
	}
	if at.After(d.Until) {
		d.Until = at
	}
	if len(p.Later) == 2 && p.Later[0].Why != LaterPruned {
		p.Later[0], p.Later[1] = p.Later[1], p.Later[0]
	}
	return true
}
