package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Checkin is what a node of a job restoring a step writes once it has
// verified its own files of the step (manifest.RestoreCheckinKey): the
// restore barrier places the step on no node before every node of the run
// has checked in. Only the key is read (one LIST per look); the content
// is for a person reading the bucket.
type Checkin struct {
	Step  int64  `json:"step"`
	Run   string `json:"run"`
	Nodes int    `json:"nodes"`
	Node  int    `json:"node"`
	// By names the node (host name and command), At when it checked in.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// CheckIn writes c create-only at its key. It reports whether this call
// wrote it: a check-in already there (the same node restored the step
// before, in the same run) counts as checked in.
func CheckIn(ctx context.Context, st store.Store, prefix string, c Checkin) (bool, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	set := manifest.PartSet{Step: c.Step, Nodes: c.Nodes, Run: c.Run}
	key := manifest.RestoreCheckinKey(prefix, set, c.Node)
	return createOnly(ctx, st, key, data, "check in at "+key, nil)
}

// CheckedIn lists the nodes checked in for set, with one LIST (a page
// holds 1,000 nodes): in[k] is true when node k has.
func CheckedIn(ctx context.Context, st store.Store, prefix string, set manifest.PartSet) ([]bool, error) {
	in := make([]bool, set.Nodes)
	p := manifest.RestoreCheckinsPrefix(prefix, set)
	err := st.List(ctx, p, "", 0, func(o store.ObjectInfo) error {
		got, k, ok := manifest.ParseCheckinKey(prefix, o.Key)
		if ok && got == set {
			in[k] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the check-ins under %s: %w", p, err)
	}
	return in, nil
}
