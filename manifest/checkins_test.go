package manifest

import (
	"strings"
	"testing"
)

// A check-in's key holds its step, run, node count and node; a set's
// prefix lists exactly its own check-ins, never those of another start of
// the job, another size or another step, nor node parts or damage records.
func TestCheckinKeys(t *testing.T) {
	set := PartSet{Step: 600, Nodes: 4, Run: "4242.1"}
	key := RestoreCheckinKey("run", set, 3)
	if key != "run/checkins/000000000600/run-4242.1/of-00004/node-00003.json" {
		t.Fatalf("RestoreCheckinKey = %q", key)
	}
	if !strings.HasPrefix(key, RestoreCheckinsPrefix("run", set)) || !strings.HasPrefix(key, CheckinsPrefix("run")) {
		t.Fatalf("%s is not under its set's prefix", key)
	}
	for _, other := range []PartSet{{Step: 600, Nodes: 4, Run: "4242.2"}, {Step: 600, Nodes: 40, Run: "4242.1"}, {Step: 6000, Nodes: 4, Run: "4242.1"}, {Step: 60, Nodes: 4, Run: "4242.1"}} {
		if strings.HasPrefix(RestoreCheckinKey("run", other, 0), RestoreCheckinsPrefix("run", set)) {
			t.Errorf("a check-in of %v is under the prefix of %v", other, set)
		}
	}
	got, k, ok := ParseCheckinKey("run", key)
	if !ok || got != set || k != 3 {
		t.Errorf("ParseCheckinKey(%q) = %v %d %v", key, got, k, ok)
	}
	for _, bad := range []string{
		"run/checkins/000000000600/of-00004/node-00003.json", // no run
		"run/checkins/000000000600/run-4242.1/of-00004/node-00004.json",
		"run/checkins/x", PartKey("run", set, 3), DamagedKey("run", 600),
	} {
		if _, _, ok := ParseCheckinKey("run", bad); ok {
			t.Errorf("%q parsed as a check-in", bad)
		}
	}
}
