package r2cost

import (
	"math"
	"testing"
)

func TestRequests(t *testing.T) {
	got := Requests(map[string]int64{"PutObject": 1e6, "GetObject": 2e6, "DeleteObject": 5e6, "AbortMultipartUpload": 1})
	if want := 4.50 + 2*0.36; math.Abs(got-want) > 1e-9 {
		t.Errorf("Requests = %v, want %v (deletes and aborts free)", got, want)
	}
	if got := Reads(1e6); math.Abs(got-0.36) > 1e-9 {
		t.Errorf("Reads(1e6) = %v, want 0.36", got)
	}
}
