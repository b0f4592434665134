package main

import "go.uber.org/zap"

// rankZeroMarker holds the layouts whose completion marker only global
// rank 0 writes (DCP's .metadata, DeepSpeed's latest, Megatron's tracker,
// HF's trainer_state.json, a Composer sharded folder's .metadata and
// rank 0's latest-rank0.pt link, composer v0.32.1 CheckpointSaver): on a
// node of a multi-node job saving to local disks that does not hold rank
// 0, it never appears.
var rankZeroMarker = map[string]bool{"dcp": true, "deepspeed": true, "megatron": true, "hf": true, "composer": true}

const (
	markerApplied = "applied"
	markerAuto    = "auto"
)

// nodeMarker applies --no-marker on a node other than 0 of a multi-node
// job whose layout's marker only rank 0's node sees, unless --no-marker
// was given either way (--no-marker=false: every node sees the marker, on
// a shared filesystem). It returns what it decided, for logNodeMarker.
func (o *agentOptions) nodeMarker(explicit bool) string {
	if o.node.nodes <= 1 || o.node.rank == 0 || explicit {
		return ""
	}
	switch {
	case rankZeroMarker[o.layout]:
		o.noMarker = true
		return markerApplied
	case o.layout == "auto":
		return markerAuto
	}
	return ""
}

// logNodeMarker says what nodeMarker decided.
func (o agentOptions) logNodeMarker(log *zap.Logger) {
	node := zap.Int("node_rank", o.node.rank)
	switch o.markerNote {
	case markerApplied:
		log.Info("the layout's marker is written on global rank 0's node only: this node detects steps without it, as with --no-marker (--no-marker=false if every node sees it, on a shared filesystem)",
			node, zap.String("layout", o.layout))
		if o.expectedRanks == 0 {
			log.Warn("set --expected-ranks to the number of ranks saving on this node: without it a step is complete here once its files are quiet for --settle, and a rank that has not created its file yet is not waited for", node)
		}
	case markerAuto:
		log.Warn("--layout auto on a node other than 0: the dcp, deepspeed, megatron, hf and composer layouts' markers are written on rank 0's node only, so their steps never complete here; set --layout (the agent then detects without the marker) or --no-marker", node)
	}
}
