package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/ctxtime"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Who merges. Every node that lists after the last part landed sees all N
// parts; if each of them merged, a step of N nodes finishing together would
// cost up to N x N part GETs. So a node that sees all N claims the merge
// with a create-only PUT of the set's claim object: exactly one wins and
// merges; the others wait for the set's done marker, which the merging node
// writes once the manifest is committed (written, or found identical). The
// marker proves the manifest is the merge of this set, so a waiting node
// knows its own part is in it without reading it.
//
// If the claimant dies, its claim must not block the step: a waiting node
// that has not seen the marker when the lease runs out (at least
// claimLease, or ten times the estimated merge time for a large job)
// merges itself; nodes spread that by rank so that they do not all read N
// parts at once, and each checks for the manifest first (one HEAD).

// claimTiming is how long waiting nodes give the claimant, and how often
// they look for its marker. Tests shorten it.
var claimTiming = struct {
	lease   time.Duration // the least a claimant is given
	maxPoll time.Duration // the longest pause between two looks
	spread  time.Duration // per node rank (mod 16) after the lease
}{lease: 20 * time.Second, maxPoll: 2 * time.Second, spread: 250 * time.Millisecond}

type marker struct {
	Step     int64     `json:"step"`
	NodeRank int       `json:"node_rank"`
	Time     time.Time `json:"time"`
}

// markerData is a marker object's content.
func markerData(step int64, nodeRank int) []byte {
	data, _ := json.Marshal(marker{Step: step, NodeRank: nodeRank, Time: time.Now().UTC().Truncate(time.Millisecond)})
	return data
}

// putMarker writes a marker object over whatever is at key: the done
// marker (the claim is create-only: claimMerge).
func putMarker(ctx context.Context, st store.Store, key string, step int64, nodeRank int) error {
	data := markerData(step, nodeRank)
	_, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{
		CRC32C: store.CRC32C(data), ContentType: "application/json"})
	return err
}

// claimMerge tries to become the node that merges the set: it creates the
// set's claim, and loses when one is already there, whoever wrote it.
func claimMerge(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, nodeRank int) (bool, error) {
	return createOnly(ctx, st, manifest.ClaimKey(prefix, set), markerData(set.Step, nodeRank),
		fmt.Sprintf("commit step %d: claim the merge of its parts", set.Step), nil)
}

// awaitPeer waits for the claimant's done marker. It first looks after
// about the time a merge takes (estimated from rtt, how long this node's
// listing took), then backs off. It returns true once the marker is there
// and false when the lease ran out without it.
func awaitPeer(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, nodeRank int, rtt time.Duration) (bool, error) {
	estimate := time.Duration((set.Nodes+partReaders-1)/partReaders+3) * max(rtt, time.Millisecond)
	lease := max(claimTiming.lease, 10*estimate)
	deadline := time.Now().Add(lease)
	pause := min(estimate, claimTiming.maxPoll)
	key := manifest.DoneKey(prefix, set)
	for {
		if err := ctxtime.Sleep(ctx, pause); err != nil {
			return false, fmt.Errorf("commit step %d: wait for node merging it: %w", set.Step, err)
		}
		done, err := markerValid(ctx, st, prefix, set, key)
		if err != nil || done {
			return done, err
		}
		now := time.Now()
		if !now.Before(deadline) {
			// The claimant is gone or stuck: merge, nodes a little apart.
			return false, ctxtime.Sleep(ctx, time.Duration(nodeRank%16)*claimTiming.spread)
		}
		pause = min(pause*2, claimTiming.maxPoll, deadline.Sub(now))
	}
}

// markerValid reports whether the set's done marker is there and the
// step's manifest with it. A marker without a manifest is left from a step
// that was pruned (by a prune that stopped before deleting the marker):
// the step must be committed again, so it does not count.
func markerValid(ctx context.Context, st store.Store, prefix string, set manifest.PartSet, key string) (bool, error) {
	for _, k := range []string{key, manifest.ManifestKey(prefix, set.Step)} {
		_, err := st.Head(ctx, k)
		if errors.Is(err, store.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("commit step %d: look for its commit marker: %w", set.Step, err)
		}
	}
	return true, nil
}
