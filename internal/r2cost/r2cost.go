// Package r2cost prices S3 requests at Cloudflare R2's rates
// (developers.cloudflare.com/r2/pricing, read on 2026-12-02; docs/cost.md):
// Class A (writes, listings) $4.50 and Class B (reads) $0.36 per million;
// DeleteObject and AbortMultipartUpload are free.
package r2cost

const (
	// ClassAPerMillion is the price of a million Class A requests, in dollars.
	ClassAPerMillion = 4.50
	// ClassBPerMillion is the price of a million Class B requests, in dollars.
	ClassBPerMillion = 0.36
)

// opClass maps an operation, as ferry counts it, to its R2 class: "A", "B"
// or "" (free).
var opClass = map[string]string{
	"PutObject": "A", "ListObjectsV2": "A", "CreateMultipartUpload": "A", "UploadPart": "A",
	"CompleteMultipartUpload": "A", "ListParts": "A", "ListMultipartUploads": "A",
	"GetObject": "B", "HeadObject": "B",
	"DeleteObject": "", "AbortMultipartUpload": "",
}

// Requests is what requests counted by operation cost, in dollars.
func Requests(ops map[string]int64) float64 {
	var a, b int64
	for op, n := range ops {
		switch opClass[op] {
		case "A":
			a += n
		case "B":
			b += n
		}
	}
	return float64(a)*ClassAPerMillion/1e6 + float64(b)*ClassBPerMillion/1e6
}

// Reads is what n reads (GET or HEAD, Class B) cost, in dollars.
func Reads(n int64) float64 { return float64(n) * ClassBPerMillion / 1e6 }
