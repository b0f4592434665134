package main

import "testing"

// Nodes other than 0 of a multi-node job detect without the marker where
// only rank 0's node sees it. Composer was missing: a sharded folder's
// .metadata and latest-rank0.pt are rank 0's (composer v0.32.1
// CheckpointSaver, testdata/saveorders/composer-sharded.trace), so node 1
// of a composer job waited for ever for a .metadata it never sees (the
// trace replay on 2 nodes).
func TestNodeMarker(t *testing.T) {
	for _, c := range []struct {
		layout      string
		nodes, rank int
		explicit    bool
		want        string
		noMarker    bool
	}{
		{"composer", 2, 1, false, markerApplied, true},
		{"dcp", 4, 3, false, markerApplied, true},
		{"composer", 2, 0, false, "", false},
		{"composer", 1, 0, false, "", false},
		{"composer", 2, 1, true, "", false},
		{"single", 2, 1, false, "", false},
		{"auto", 2, 1, false, markerAuto, false},
	} {
		o := agentOptions{layout: c.layout}
		o.node.nodes, o.node.rank = c.nodes, c.rank
		if got := o.nodeMarker(c.explicit); got != c.want || o.noMarker != c.noMarker {
			t.Errorf("%s on node %d of %d (explicit %v): %q, no marker %v; want %q, %v", c.layout, c.rank, c.nodes, c.explicit, got, o.noMarker, c.want, c.noMarker)
		}
	}
}
