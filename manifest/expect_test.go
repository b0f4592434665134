package manifest

import (
	"strings"
	"testing"
)

// TestMergePartsChecksRecord: node 0's part carries what its record says
// the whole step holds (both nodes' files); the merge commits the union
// only when it matches: a node's file of another size (a shard torn on a
// node that saw no record) or a file no node uploaded is refused, with
// the file, the sizes and the record named.
func TestMergePartsChecksRecord(t *testing.T) {
	record := func() []Expected {
		return []Expected{
			{Path: "ckpt-rank0.pt", Size: 10, Record: ".metadata"},
			{Path: "ckpt-rank1.pt", Size: 10, Record: ".metadata"},
		}
	}
	a, b := nodePart(0, 2), nodePart(1, 2)
	a.Expect = record()
	if _, err := MergeParts([]*Part{a, b}); err != nil {
		t.Fatalf("union as recorded: %v", err)
	}
	b.Files[0].Size = 5
	_, err := MergeParts([]*Part{a, b})
	if err == nil || !strings.Contains(err.Error(), "ckpt-rank1.pt is 5 bytes, .metadata records 10") {
		t.Fatalf("torn file on node 1: %v", err)
	}
	b = nodePart(1, 2)
	a.Expect = append(record(), Expected{Path: "ckpt-rank2.pt", Size: 7, Record: ".metadata"})
	_, err = MergeParts([]*Part{a, b})
	if err == nil || !strings.Contains(err.Error(), ".metadata names ckpt-rank2.pt, which no node uploaded") {
		t.Fatalf("file no node holds: %v", err)
	}
	a.Expect, b.Expect = record(), []Expected{{Path: "ckpt-rank1.pt", Size: 11, Record: "other/.metadata"}}
	if _, err = MergeParts([]*Part{a, b}); err == nil || !strings.Contains(err.Error(), "different sizes") {
		t.Fatalf("records disagreeing: %v", err)
	}
}

func TestValidatePartExpect(t *testing.T) {
	for name, e := range map[string]Expected{
		"path outside": {Path: "../x", Size: 1, Record: ".metadata"},
		"bad record":   {Path: "x", Size: 1, Record: "/etc/x"},
		"negative":     {Path: "x", Size: -1, Record: ".metadata"},
	} {
		p := nodePart(0, 2)
		p.Expect = []Expected{e}
		if err := ValidatePart(p, "run"); err == nil || !strings.Contains(err.Error(), "expect[0]") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
