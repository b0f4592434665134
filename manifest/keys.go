package manifest

import (
	"fmt"
	"strconv"
	"strings"
)

// Location is where checkpoints live: a bucket and a key prefix, parsed
// from s3://bucket/prefix, or a folder, parsed from file:///folder.
type Location struct {
	// Scheme is FileScheme for a folder, empty for a bucket.
	Scheme string
	// Bucket is the bucket's name, or the folder's absolute path.
	Bucket string
	// Prefix has no leading or trailing slash; it may be empty (and is for
	// a folder, whose keys start at the folder).
	Prefix string
}

// FileScheme is the Scheme of a file:// location.
const FileScheme = "file"

// ParseURL parses s3://bucket[/prefix] or file:///folder.
func ParseURL(u string) (Location, error) {
	if folder, ok := strings.CutPrefix(u, FileScheme+"://"); ok {
		return parseFileURL(u, folder)
	}
	rest, ok := strings.CutPrefix(u, "s3://")
	if !ok {
		return Location{}, fmt.Errorf("%q is not an s3://bucket/prefix or file:///folder URL", u)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if bucket == "" {
		return Location{}, fmt.Errorf("%q has no bucket name", u)
	}
	if len(bucket) < 3 || len(bucket) > 63 || strings.ContainsAny(bucket, " /\\") {
		return Location{}, fmt.Errorf("%q: bucket name %q is not valid", u, bucket)
	}
	if !clean(prefix) {
		return Location{}, fmt.Errorf("%q: prefix %q is not a clean path", u, prefix)
	}
	return Location{Bucket: bucket, Prefix: prefix}, nil
}

// parseFileURL parses the folder of file:///folder, an absolute path taken
// as written (no percent-decoding), with no empty, "." or ".." segment.
func parseFileURL(u, folder string) (Location, error) {
	if !strings.HasPrefix(folder, "/") {
		return Location{}, fmt.Errorf("%q: want file:///absolute/folder (three slashes, no host)", u)
	}
	folder = strings.TrimRight(folder, "/")
	switch {
	case folder == "":
		return Location{}, fmt.Errorf("%q names the filesystem's root: name a folder below it", u)
	case strings.IndexByte(folder, 0) >= 0 || !clean(folder[1:]):
		return Location{}, fmt.Errorf("%q: folder %q is not a clean absolute path", u, folder)
	}
	return Location{Scheme: FileScheme, Bucket: folder}, nil
}

// clean reports whether p (no leading slash) has no empty, "." or ".."
// segment.
func clean(p string) bool {
	return !strings.Contains("/"+p+"/", "/../") && !strings.Contains("/"+p+"/", "/./") && !strings.Contains(p, "//")
}

// IsFile reports whether l is a folder (file://) rather than a bucket.
func (l Location) IsFile() bool { return l.Scheme == FileScheme }

// String returns the s3:// or file:// URL.
func (l Location) String() string {
	return l.URL("")
}

// URL returns the URL of key at l's bucket or folder (key includes the
// prefix, as the key functions of this package return it), or of l itself
// when key is empty.
func (l Location) URL(key string) string {
	u := "s3://" + l.Bucket
	if l.IsFile() {
		u = FileScheme + "://" + l.Bucket
	}
	if key == "" {
		key = l.Prefix
	}
	if key == "" {
		return u
	}
	return u + "/" + key
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

// ScratchPrefix is the key prefix of the short-lived objects ferry writes
// and deletes again while it checks the store (the conditional-write check,
// ferry doctor). Nothing reads them as part of a step.
func ScratchPrefix(prefix string) string { return join(prefix, "scratch/") }

// PartsPrefix is the key prefix under which node part manifests live.
func PartsPrefix(prefix string) string { return join(prefix, "parts/") }

// PartSet names the part manifests that together commit a step: those of
// one run of an N-node job.
type PartSet struct {
	Step  int64
	Nodes int
	// Run separates incarnations of a job that may save the same step
	// twice: a job restarted from an earlier step re-saves later steps
	// with other content, and its parts must never be merged with parts a
	// previous incarnation left. Empty when the job has no run identity.
	Run string
}

// String names the set for messages.
func (s PartSet) String() string {
	if s.Run == "" {
		return fmt.Sprintf("step %d of %d nodes", s.Step, s.Nodes)
	}
	return fmt.Sprintf("step %d of %d nodes, run %s", s.Step, s.Nodes, s.Run)
}

// MaxRunLen bounds the length of a run identity.
const MaxRunLen = 64

// CheckRun accepts a run identity: empty, or 1 to MaxRunLen letters,
// digits, '.', '_' and '-', not starting with '.'.
func CheckRun(run string) error {
	if run == "" {
		return nil
	}
	if len(run) > MaxRunLen || run[0] == '.' {
		return fmt.Errorf("run %q: want at most %d letters, digits, '.', '_' or '-', not starting with '.'", run, MaxRunLen)
	}
	for _, c := range run {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("run %q: want at most %d letters, digits, '.', '_' or '-', not starting with '.'", run, MaxRunLen)
		}
	}
	return nil
}

// StepPartsPrefix is the key prefix of the parts of a set:
// P/parts/<step>/[run-<run>/]of-<N>/. One LIST page per 1,000 nodes returns
// exactly them; the node count and the run are in the key so that parts
// left by a run of another size, or by an earlier incarnation, never count
// towards this one.
func StepPartsPrefix(prefix string, set PartSet) string {
	p := PartsPrefix(prefix) + StepString(set.Step) + "/"
	if set.Run != "" {
		p += "run-" + set.Run + "/"
	}
	return p + fmt.Sprintf("of-%05d/", set.Nodes)
}

// PartKey is the key of node nodeRank's part manifest of a set.
func PartKey(prefix string, set PartSet, nodeRank int) string {
	return StepPartsPrefix(prefix, set) + fmt.Sprintf("node-%05d.json", nodeRank)
}

// ParsePartKey parses a key under PartsPrefix into its set and node rank,
// reporting false for anything else.
func ParsePartKey(prefix, key string) (set PartSet, nodeRank int, ok bool) {
	rest, ok := strings.CutPrefix(key, PartsPrefix(prefix))
	if !ok || len(rest) < 13 || rest[12] != '/' {
		return PartSet{}, 0, false
	}
	step, err := strconv.ParseInt(rest[:12], 10, 64)
	if err != nil || step < 0 {
		return PartSet{}, 0, false
	}
	rest = rest[13:]
	var run string
	if r, ok := strings.CutPrefix(rest, "run-"); ok {
		run, rest, ok = strings.Cut(r, "/")
		if !ok || run == "" || CheckRun(run) != nil {
			return PartSet{}, 0, false
		}
	}
	// of-<N5>/node-<K5>.json
	if len(rest) != 8+1+15 || !strings.HasPrefix(rest, "of-") || rest[8] != '/' ||
		!strings.HasPrefix(rest[9:], "node-") || !strings.HasSuffix(rest, ".json") {
		return PartSet{}, 0, false
	}
	n, err1 := strconv.Atoi(rest[3:8])
	k, err2 := strconv.Atoi(rest[14:19])
	if err1 != nil || err2 != nil || n < 1 || k < 0 || k >= n {
		return PartSet{}, 0, false
	}
	return PartSet{Step: step, Nodes: n, Run: run}, k, true
}

// ClaimKey is the key of the object a node creates to merge a set.
func ClaimKey(prefix string, set PartSet) string { return StepPartsPrefix(prefix, set) + "claim.json" }

// DoneKey is the key of the marker written once a set's merge is the
// step's committed manifest.
func DoneKey(prefix string, set PartSet) string { return StepPartsPrefix(prefix, set) + "done.json" }

// ParseMarkerKey reports whether key is a set's claim or done marker, and
// its set.
func ParseMarkerKey(prefix, key string) (PartSet, bool) {
	for _, name := range []string{"claim.json", "done.json"} {
		dir, ok := strings.CutSuffix(key, name)
		if !ok {
			continue
		}
		// A marker sits where a part of node 0 would: parse that key.
		if set, k, ok := ParsePartKey(prefix, dir+"node-00000.json"); ok && k == 0 {
			return set, true
		}
	}
	return PartSet{}, false
}

// PeersPrefix is the key prefix under which nodes restoring together
// announce their addresses (restore --peers bucket), one folder per group
// of nodes.
func PeersPrefix(prefix string) string { return join(prefix, "peers/") }

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

// DamagedPrefix is the key prefix under which restores record steps they
// found damaged (an object missing or not matching its hash, a manifest
// that does not validate), one record per step, so that every later
// restore skips them.
func DamagedPrefix(prefix string) string { return join(prefix, "damaged/") }

// DamagedKey is the key of the damage record of a step; it sorts like the
// step's manifest key, newest first.
func DamagedKey(prefix string, step int64) string {
	return DamagedPrefix(prefix) + fmt.Sprintf("%012d-%012d.json", MaxStep-step, step)
}

// StepFromDamagedKey parses the step out of a damage record's key.
func StepFromDamagedKey(prefix, key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, DamagedPrefix(prefix))
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

// StepFromDataKey parses the step of a data object's key:
// data/<step>/<attempt>/<path>, or a pack's, data/<step>/<attempt>.pack-<name>.
func StepFromDataKey(prefix, key string) (int64, bool) {
	rest, ok := strings.CutPrefix(key, DataPrefix(prefix))
	if !ok || len(rest) < 13 || rest[12] != '/' {
		return 0, false
	}
	var step int64
	for _, c := range rest[:12] {
		if c < '0' || c > '9' {
			return 0, false
		}
		step = step*10 + int64(c-'0')
	}
	return step, true
}

// CheckStep reports whether step can be represented.
func CheckStep(step int64) error {
	if step < 0 || step > MaxStep {
		return fmt.Errorf("step %d outside 0..%d", step, int64(MaxStep))
	}
	return nil
}
