package manifest

import (
	"fmt"
	"strings"
)

// CheckinsPrefix is the key prefix under which the nodes of a job restoring
// together check in, beside the damage records (DamagedPrefix): a node that
// has verified its own files of a step writes its check-in, and no node
// places the step before every node of its run has checked in (the
// restore barrier). Check-ins are tiny and only matter while a restore
// waits; prune deletes them once they are older than its grace period.
func CheckinsPrefix(prefix string) string { return join(prefix, "checkins/") }

// RestoreCheckinsPrefix is the key prefix of the check-ins of one set (a
// step, the job's node count and its run):
// P/checkins/<step>/run-<run>/of-<N>/. One LIST page per 1,000 nodes
// returns exactly them; like a step's node parts (StepPartsPrefix), the run
// and the node count are in the key so that check-ins of an earlier start
// of the job, or of a job of another size, never count. The run must not
// be empty: without a run identity there is no barrier.
func RestoreCheckinsPrefix(prefix string, set PartSet) string {
	return CheckinsPrefix(prefix) + StepString(set.Step) + "/run-" + set.Run + "/" + fmt.Sprintf("of-%05d/", set.Nodes)
}

// RestoreCheckinKey is the key of node nodeRank's check-in of a set:
// P/checkins/<step>/run-<run>/of-<N>/node-<K>.json.
func RestoreCheckinKey(prefix string, set PartSet, nodeRank int) string {
	return RestoreCheckinsPrefix(prefix, set) + fmt.Sprintf("node-%05d.json", nodeRank)
}

// ParseCheckinKey parses a key under CheckinsPrefix into its set and node
// rank, reporting false for anything else (a check-in always has a run).
func ParseCheckinKey(prefix, key string) (set PartSet, nodeRank int, ok bool) {
	rest, ok := strings.CutPrefix(key, CheckinsPrefix(prefix))
	if !ok {
		return PartSet{}, 0, false
	}
	// The same layout as a node part's key, under another folder.
	set, nodeRank, ok = ParsePartKey(prefix, PartsPrefix(prefix)+rest)
	if !ok || set.Run == "" {
		return PartSet{}, 0, false
	}
	return set, nodeRank, true
}
