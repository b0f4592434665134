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
