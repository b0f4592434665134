package manifest

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxSinglePut is the largest object ferry writes with one PUT (R2's limit
// is 5 GiB - 5 MiB).
const MaxSinglePut = 5<<30 - 5<<20

// Location is a bucket and a key prefix, parsed from s3://bucket/prefix.
type Location struct {
	Bucket string
	// Prefix has no leading or trailing slash; it may be empty.
	Prefix string
}

// ParseURL parses s3://bucket[/prefix].
func ParseURL(u string) (Location, error) {
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return Location{}, fmt.Errorf("%q is not an s3://bucket/prefix URL", u)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if bucket == "" {
		return Location{}, fmt.Errorf("%q has no bucket name", u)
	}
	if len(bucket) < 3 || len(bucket) > 63 || strings.ContainsAny(bucket, " /\\") {
		return Location{}, fmt.Errorf("%q: bucket name %q is not valid", u, bucket)
	}
	if strings.Contains("/"+prefix+"/", "/../") || strings.Contains("/"+prefix+"/", "/./") || strings.Contains(prefix, "//") {
		return Location{}, fmt.Errorf("%q: prefix %q is not a clean path", u, prefix)
	}
	return Location{Bucket: bucket, Prefix: prefix}, nil
}

// String returns the s3:// URL.
func (l Location) String() string {
	if l.Prefix == "" {
		return "s3://" + l.Bucket
	}
	return "s3://" + l.Bucket + "/" + l.Prefix
}

func join(prefix, rest string) string {
	if prefix == "" {
		return rest
	}
	return prefix + "/" + rest
}

// ManifestsPrefix is the key prefix under which committed manifests live.
func ManifestsPrefix(prefix string) string { return join(prefix, "manifests/") }

// DataPrefix is the key prefix under which file objects live.
func DataPrefix(prefix string) string { return join(prefix, "data/") }

// PartsPrefix is the key prefix under which node part manifests live.
func PartsPrefix(prefix string) string { return join(prefix, "parts/") }

// StepPartsPrefix is the key prefix of the part manifests of one step
// written by a job of the given number of nodes: one LIST page per 1,000
// nodes returns exactly them. The node count is in the key so that parts
// left by an earlier run of another size never count towards this one.
func StepPartsPrefix(prefix string, step int64, nodes int) string {
	return PartsPrefix(prefix) + StepString(step) + "/" + fmt.Sprintf("of-%05d/", nodes)
}

// PartKey is the key of node nodeRank's part manifest of a step.
func PartKey(prefix string, step int64, nodes, nodeRank int) string {
	return StepPartsPrefix(prefix, step, nodes) + fmt.Sprintf("node-%05d.json", nodeRank)
}

// ParsePartKey parses a key under PartsPrefix into its step, node count and
// node rank, reporting false for anything else.
func ParsePartKey(prefix, key string) (step int64, nodes, nodeRank int, ok bool) {
	rest, ok := strings.CutPrefix(key, PartsPrefix(prefix))
	// <step12>/of-<N5>/node-<K5>.json
	if !ok || len(rest) != 12+1+8+1+15 || rest[12] != '/' || !strings.HasPrefix(rest[13:], "of-") ||
		rest[21] != '/' || !strings.HasPrefix(rest[22:], "node-") || !strings.HasSuffix(rest, ".json") {
		return 0, 0, 0, false
	}
	s, err1 := strconv.ParseInt(rest[:12], 10, 64)
	n, err2 := strconv.Atoi(rest[16:21])
	k, err3 := strconv.Atoi(rest[27:32])
	if err1 != nil || err2 != nil || err3 != nil || s < 0 || n < 1 || k < 0 || k >= n {
		return 0, 0, 0, false
	}
	return s, n, k, true
}

// PrunedPrefix is the key prefix under which prune keeps the manifests it
// removed (tombstones) for the grace period: objects they reference are not
// deleted before the tombstone is that old, so a push that read a manifest
// just before it was pruned can still reference its objects.
func PrunedPrefix(prefix string) string { return join(prefix, "pruned/") }

// PrunedKey is the key of the tombstone of a pruned step's manifest.
func PrunedKey(prefix string, step int64) string {
	return PrunedPrefix(prefix) + fmt.Sprintf("%012d-%012d.json", MaxStep-step, step)
}

// StepFromPrunedKey parses the step out of a tombstone key.
func StepFromPrunedKey(prefix, key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, PrunedPrefix(prefix))
	if !ok {
		return 0, false
	}
	return StepFromManifestKey(prefix, ManifestsPrefix(prefix)+rest)
}

// StepString zero-pads a step to 12 digits.
func StepString(step int64) string { return fmt.Sprintf("%012d", step) }

// ManifestKey is the key of the committed manifest of a step.
func ManifestKey(prefix string, step int64) string {
	return ManifestsPrefix(prefix) + fmt.Sprintf("%012d-%012d.json", MaxStep-step, step)
}

// StepFromManifestKey parses the step out of a manifest key, reporting false
// for keys that are not manifest keys under prefix.
func StepFromManifestKey(prefix, key string) (int64, bool) {
	name, ok := strings.CutPrefix(key, ManifestsPrefix(prefix))
	if !ok || len(name) != 12+1+12+5 || name[12] != '-' || !strings.HasSuffix(name, ".json") {
		return 0, false
	}
	inv, err1 := strconv.ParseInt(name[:12], 10, 64)
	step, err2 := strconv.ParseInt(name[13:25], 10, 64)
	if err1 != nil || err2 != nil || step < 0 || inv != MaxStep-step {
		return 0, false
	}
	return step, true
}

// DataKey is the object key of a file of a step written by one push attempt.
// attempt separates concurrent or retried pushes of the same step, so a push
// never overwrites an object a committed manifest refers to.
func DataKey(prefix string, step int64, attempt, relPath string) string {
	return DataPrefix(prefix) + StepString(step) + "/" + attempt + "/" + relPath
}

// CheckStep reports whether step can be represented.
func CheckStep(step int64) error {
	if step < 0 || step > MaxStep {
		return fmt.Errorf("step %d outside 0..%d", step, int64(MaxStep))
	}
	return nil
}
