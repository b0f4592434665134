package manifest

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// The object store's limits on one object, as the format checks a file's
// part_size against them: S3's and R2's. internal/store states the same
// numbers for the stores, and internal/remote does not compile if the two
// ever differ.
const (
	// MaxSinglePut is the largest object ferry writes with one PUT:
	// 5 GiB - 5 MiB, R2's limit (S3 allows 5 GiB).
	MaxSinglePut = 5<<30 - 5<<20
	// MinPartSize is the least size of a multipart part but the last.
	MinPartSize = 5 << 20
	// MaxPartSize is the largest multipart part.
	MaxPartSize = 5 << 30
	// MaxParts is the most parts of one multipart upload.
	MaxParts = 10000
)

// Limits a reader enforces on untrusted manifests.
const (
	// MaxFileSize is the largest object S3 or R2 stores (5 TiB).
	MaxFileSize = 5 << 40
	// MaxFiles bounds the number of entries in one manifest.
	MaxFiles = 1_000_000
	// MaxPathLen bounds a path's length in bytes (S3 keys are at most 1,024).
	MaxPathLen = 1024
	// maxRank bounds a file's rank.
	maxRank = 1 << 24
)

// Validate checks a manifest strictly, as untrusted input: every path must be
// relative, clean, inside the checkpoint and unique; sizes, hashes and part
// sizes must be plausible; every key must lie under prefix. The error names
// the offending field.
func Validate(m *Manifest, prefix string) error {
	if err := checkFormat(m.Format); err != nil {
		return err
	}
	if err := checkShards(m, prefix); err != nil {
		return err
	}
	if m.Step < 0 || m.Step > MaxStep {
		return fmt.Errorf("manifest field step: %d outside 0..%d", m.Step, int64(MaxStep))
	}
	if m.Created.IsZero() {
		return fmt.Errorf("manifest field created: missing")
	}
	if m.Revision < 0 {
		return fmt.Errorf("manifest field revision: %d is negative", m.Revision)
	}
	if m.Nodes < 0 || m.Nodes > MaxNodes {
		return fmt.Errorf("manifest field nodes: %d outside 0..%d", m.Nodes, MaxNodes)
	}
	if len(m.Files)+len(m.Symlinks) > MaxFiles {
		return fmt.Errorf("manifest field files: more than %d entries", MaxFiles)
	}
	seen := make(map[string]string, len(m.Files)+len(m.Symlinks))
	keyPrefix := DataPrefix(prefix)
	major, _, _ := strings.Cut(m.Format, ".")
	packs := map[string]int64{}
	for i, f := range m.Files {
		field := fmt.Sprintf("files[%d]", i)
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("manifest field %s.path: %w", field, err)
		}
		if prev, dup := seen[f.Path]; dup {
			return fmt.Errorf("manifest field %s.path: %q repeats %s", field, f.Path, prev)
		}
		seen[f.Path] = field
		if err := checkFile(f, field, keyPrefix, major, packs); err != nil {
			return err
		}
	}
	for i, s := range m.Symlinks {
		field := fmt.Sprintf("symlinks[%d]", i)
		if err := checkPath(s.Path); err != nil {
			return fmt.Errorf("manifest field %s.path: %w", field, err)
		}
		if prev, dup := seen[s.Path]; dup {
			return fmt.Errorf("manifest field %s.path: %q repeats %s", field, s.Path, prev)
		}
		seen[s.Path] = field
		if err := checkLinkTarget(s.Path, s.Target); err != nil {
			return fmt.Errorf("manifest field %s.target: %w", field, err)
		}
	}
	// No entry may sit below another entry: "a" as a file and "a/b" would
	// make restore write through a file or, worse, through a symlink.
	for p, field := range seen {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if other, ok := seen[dir]; ok {
				return fmt.Errorf("manifest field %s.path: %q lies below %s, which is not a directory", field, p, other)
			}
		}
	}
	return nil
}

// checkFile checks one file entry's fields but its path (Validate checks
// paths against each other): size, hash, key, part size, pack, rank and
// modification time.
func checkFile(f File, field, keyPrefix, major string, packs map[string]int64) error {
	if f.Size < 0 || f.Size > MaxFileSize {
		return fmt.Errorf("manifest field %s.size: %d outside 0..%d", field, f.Size, int64(MaxFileSize))
	}
	if !isHex64(f.BLAKE3) {
		return fmt.Errorf("manifest field %s.blake3: %q is not 64 lower-case hex digits", field, f.BLAKE3)
	}
	if !strings.HasPrefix(f.Key, keyPrefix) || len(f.Key) == len(keyPrefix) || len(f.Key) > MaxPathLen || strings.Contains(f.Key, "/../") || strings.HasSuffix(f.Key, "/..") {
		return fmt.Errorf("manifest field %s.key: %q is not an object under %q", field, f.Key, keyPrefix)
	}
	if err := checkPartSize(f.PartSize, f.Size); err != nil {
		return fmt.Errorf("manifest field %s.part_size: %w", field, err)
	}
	if err := checkPack(f, major, packs); err != nil {
		return fmt.Errorf("manifest field %s: %w", field, err)
	}
	if f.Rank != nil && (*f.Rank < 0 || *f.Rank > maxRank) {
		return fmt.Errorf("manifest field %s.rank: %d out of range", field, *f.Rank)
	}
	if err := checkMTime(f.MTime); err != nil {
		return fmt.Errorf("manifest field %s.mtime: %w", field, err)
	}
	return nil
}

// CheckPath reports why p cannot be a file's path in a manifest (nil if
// it can): writers check names with it before uploading anything.
func CheckPath(p string) error { return checkPath(p) }

// checkPath accepts a relative, clean, slash-separated path without "." or
// ".." elements, control characters or backslashes.
func checkPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > MaxPathLen:
		return fmt.Errorf("path longer than %d bytes", MaxPathLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("%q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute", p)
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("%q contains a backslash or NUL", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q contains a control character", p)
		}
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return fmt.Errorf("%q contains a .. element", p)
		}
		if el == "" || el == "." {
			return fmt.Errorf("%q is not a clean path", p)
		}
	}
	return nil
}

// checkLinkTarget accepts a relative target that, resolved from the link's
// directory, stays inside the checkpoint root.
func checkLinkTarget(linkPath, target string) error {
	if target == "" {
		return fmt.Errorf("empty target")
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("%q is absolute", target)
	}
	if strings.ContainsAny(target, "\\\x00") || len(target) > MaxPathLen {
		return fmt.Errorf("%q is not an acceptable target", target)
	}
	resolved := path.Join(path.Dir(linkPath), target)
	if resolved == "." || resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("%q points outside the checkpoint", target)
	}
	return nil
}

func checkPartSize(partSize, size int64) error {
	if partSize == 0 {
		if size > MaxSinglePut {
			return fmt.Errorf("0 (single PUT) for a file of %d bytes", size)
		}
		return nil
	}
	if partSize < MinPartSize || partSize > MaxPartSize {
		return fmt.Errorf("%d outside %d..%d", partSize, int64(MinPartSize), int64(MaxPartSize))
	}
	if (size+partSize-1)/partSize > MaxParts {
		return fmt.Errorf("%d makes more than %d parts for %d bytes", partSize, MaxParts, size)
	}
	return nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
