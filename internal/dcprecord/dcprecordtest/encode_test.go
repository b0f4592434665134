package dcprecordtest

import (
	"maps"
	"testing"

	"github.com/ferrylabs/ferry/internal/dcprecord"
)

// TestEncodeReadsBack: what Encode writes, dcprecord reads as torch's.
func TestEncodeReadsBack(t *testing.T) {
	for _, sizes := range []map[string]int64{
		{"__0_0.distcp": 0},
		{"__0_0.distcp": 127, "__1_0.distcp": 128, "__2_0.distcp": 1 << 40},
	} {
		rec, err := dcprecord.Parse(Encode(sizes))
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(rec.Sizes, sizes) || rec.Items != len(sizes) {
			t.Fatalf("read %v (%d items), want %v", rec.Sizes, rec.Items, sizes)
		}
	}
}
