package manifest

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/zeebo/blake3"
)

// Sharded manifests. A manifest is one JSON document of at most
// MaxManifestSize (64 MiB) bytes, about 200,000 files. A step with more
// (a file per rank per writer thread of a large job reaches 1,000,000) is
// committed as format 2.0: the manifest keeps the step's fields and its
// symlinks and lists shards, objects of up to ShardFiles files each, with
// the size and BLAKE3 of each shard's bytes, its file count and the range
// of ranks it holds. Shards are written before the manifest, under the
// step's data prefix, so the manifest still commits the step in one
// create-only PUT and prune treats them like the step's file objects.
// Files are grouped into shards by rank, so a restore of some ranks reads
// only their shards. Readers of format 1.x reject 2.0 ("upgrade ferry");
// manifests that fit in one document stay 1.x.

// ShardedFormat is the format version of a sharded manifest.
const ShardedFormat = "2.0"

// ShardFiles is the most files one shard holds (about 15 MiB of JSON).
const ShardFiles = 50_000

// maxShards bounds the shards of one manifest (MaxFiles / ShardFiles).
const maxShards = MaxFiles / ShardFiles

// shardAt is where the writer shards: above an estimated single-document
// size of 48 MiB (below MaxManifestSize with room for the estimate's
// error), ShardFiles files per shard. Tests lower both.
var shardAt = struct {
	size  int64
	files int
}{48 << 20, ShardFiles}

// Shard is one object holding some of a sharded manifest's files.
type Shard struct {
	// Key is the shard object's key, under the step's data prefix.
	Key string `json:"key"`
	// Size and BLAKE3 are of the shard object's bytes: a reader checks
	// both before trusting it.
	Size   int64  `json:"size"`
	BLAKE3 string `json:"blake3"`
	// Files and Bytes count the shard's files and their sizes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// MinRank and MaxRank bound the ranks of the shard's ranked files (nil
	// when it has none); Unranked is set when it holds files without a rank.
	MinRank  *int `json:"min_rank,omitempty"`
	MaxRank  *int `json:"max_rank,omitempty"`
	Unranked bool `json:"unranked,omitempty"`
}

// shardDoc is a shard object's content.
type shardDoc struct {
	Format string `json:"format"`
	Step   int64  `json:"step"`
	Index  int    `json:"index"`
	Files  []File `json:"files"`
}

// Sharded reports whether the manifest's files live in shard objects.
func (m *Manifest) Sharded() bool { return len(m.Shards) > 0 }

// entryOverhead is what a file entry of an indented document takes beside
// its path and key, every field at its widest (TestShardEstimate): names,
// the hash, the numbers, the mtime, quotes and indentation.
const entryOverhead = 330

// NeedsShards reports whether the manifest's estimated single-document
// size is above the size where the writer shards.
func NeedsShards(m *Manifest) bool {
	est := int64(0)
	for _, f := range m.Files {
		est += int64(len(f.Path)+len(f.Key)) + entryOverhead
		if est > shardAt.size {
			return true
		}
	}
	return false
}

// EncodeShards cuts m's files into shard documents, files grouped by rank
// (unranked last) and sorted by path within a shard, the shards' keys under
// the step's data prefix for the writer attempt attempt. It hands each
// shard, described, with its bytes to put, one at a time and in order, and
// returns the manifest to commit: format 2.0 (3.0 with packed files), the shards listed, no files
// inline. An error from put is returned as it is.
func EncodeShards(m *Manifest, prefix, attempt string, put func(sh Shard, data []byte) error) (*Manifest, error) {
	files := append([]File(nil), m.Files...)
	sort.SliceStable(files, func(i, j int) bool { return rankLess(files[i].Rank, files[j].Rank) })
	var shards []Shard
	for i := 0; len(files) > 0; i++ {
		n := min(len(files), shardAt.files)
		chunk := files[:n]
		files = files[n:]
		sort.Slice(chunk, func(a, b int) bool { return chunk[a].Path < chunk[b].Path })
		data, err := json.MarshalIndent(shardDoc{Format: ShardedFormat, Step: m.Step, Index: i, Files: chunk}, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode manifest shard %d: %w", i, err)
		}
		sh := describeShard(chunk)
		sh.Key = DataKey(prefix, m.Step, attempt, fmt.Sprintf("shard-%05d.json", i))
		sh.Size, sh.BLAKE3 = int64(len(data)), hash(data)
		if err := put(sh, data); err != nil {
			return nil, err
		}
		shards = append(shards, sh)
	}
	h := *m
	h.Format, h.Files, h.Shards = FormatFor(ShardedFormat, m.Files), nil, shards
	return &h, nil
}

// rankLess orders ranks with unranked files last.
func rankLess(a, b *int) bool {
	switch {
	case a == nil:
		return false
	case b == nil:
		return true
	}
	return *a < *b
}

func describeShard(files []File) Shard {
	sh := Shard{Files: len(files)}
	for _, f := range files {
		sh.Bytes += f.Size
		if f.Rank == nil {
			sh.Unranked = true
			continue
		}
		if sh.MinRank == nil || *f.Rank < *sh.MinRank {
			sh.MinRank = f.Rank
		}
		if sh.MaxRank == nil || *f.Rank > *sh.MaxRank {
			sh.MaxRank = f.Rank
		}
	}
	return sh
}

func hash(data []byte) string {
	sum := blake3.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ShardFilter selects the shards a reader needs; nil reads all.
type ShardFilter func(Shard) bool

// RanksFilter selects the shards holding a file of a wanted rank, or a
// file without a rank (every rank needs those).
func RanksFilter(want func(rank *int) bool) ShardFilter {
	return func(s Shard) bool {
		if s.Unranked || s.MinRank == nil {
			return true
		}
		for r := *s.MinRank; r <= *s.MaxRank; r++ {
			if want(&r) {
				return true
			}
		}
		return false
	}
}

// DecodeShard checks data, the bytes read of shard i of the manifest of
// step, against sh, the manifest's description of the shard, and returns
// its files.
func DecodeShard(data []byte, step int64, i int, sh Shard) ([]File, error) {
	if int64(len(data)) != sh.Size || hash(data) != sh.BLAKE3 {
		return nil, fmt.Errorf("manifest shard %s: %d bytes that do not match the size (%d) and BLAKE3 the manifest records", sh.Key, len(data), sh.Size)
	}
	n, err := checkArrayLengths(data)
	if err != nil {
		return nil, fmt.Errorf("manifest shard %s: %w", sh.Key, err)
	}
	doc := shardDoc{Files: make([]File, 0, n)}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("manifest shard %s is not valid JSON: %w", sh.Key, err)
	}
	if doc.Format != ShardedFormat || doc.Step != step || doc.Index != i || len(doc.Files) != sh.Files {
		return nil, fmt.Errorf("manifest shard %s: says format %q, step %d, index %d, %d files; want %s, %d, %d, %d",
			sh.Key, doc.Format, doc.Step, doc.Index, len(doc.Files), ShardedFormat, step, i, sh.Files)
	}
	// A reader of some ranks skips shards by these fields: they must be
	// exact, or a rank's file could be skipped.
	got := describeShard(doc.Files)
	if got.Bytes != sh.Bytes || got.Unranked != sh.Unranked || !sameRank(got.MinRank, sh.MinRank) || !sameRank(got.MaxRank, sh.MaxRank) {
		return nil, fmt.Errorf("manifest shard %s: its files do not match the bytes and ranks the manifest records for it", sh.Key)
	}
	return doc.Files, nil
}

// checkShards checks the shard list of a sharded manifest as decoded,
// before any shard is read.
func checkShards(m *Manifest, prefix string) error {
	major, _, _ := strings.Cut(m.Format, ".")
	switch {
	case major == "1" && m.Sharded():
		return errors.New("manifest field shards: not allowed in format 1")
	case major == "1" || major == "3" && !m.Sharded():
		return nil
	case !m.Sharded():
		return fmt.Errorf("manifest field shards: format %s needs at least one", m.Format)
	case len(m.Shards) > maxShards:
		return fmt.Errorf("manifest field shards: more than %d", maxShards)
	}
	keyPrefix := DataPrefix(prefix)
	seen := map[string]bool{}
	for i, s := range m.Shards {
		switch {
		case !strings.HasPrefix(s.Key, keyPrefix) || len(s.Key) > MaxPathLen || strings.Contains(s.Key, "/../") || seen[s.Key]:
			return fmt.Errorf("manifest field shards[%d].key: %q is not a new object under %q", i, s.Key, keyPrefix)
		case s.Size <= 0 || s.Size > MaxManifestSize:
			return fmt.Errorf("manifest field shards[%d].size: %d outside 1..%d", i, s.Size, MaxManifestSize)
		case !isHex64(s.BLAKE3):
			return fmt.Errorf("manifest field shards[%d].blake3: %q is not 64 lower-case hex digits", i, s.BLAKE3)
		case s.Files < 0 || s.Files > ShardFiles:
			return fmt.Errorf("manifest field shards[%d].files: %d outside 0..%d", i, s.Files, ShardFiles)
		case (s.MinRank == nil) != (s.MaxRank == nil) || (s.MinRank != nil && (*s.MinRank < 0 || *s.MinRank > *s.MaxRank || *s.MaxRank > maxRank)):
			return fmt.Errorf("manifest field shards[%d]: rank range %v..%v is not a range", i, s.MinRank, s.MaxRank)
		}
		seen[s.Key] = true
	}
	return nil
}

func sameRank(a, b *int) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

// SetShardThresholds makes the writer shard manifests above size bytes
// (estimated), files files a shard, and returns a function that restores
// the defaults. For tests of readers of sharded manifests.
func SetShardThresholds(size int64, files int) (restore func()) {
	saved := shardAt
	shardAt.size, shardAt.files = size, min(max(files, 1), ShardFiles)
	return func() { shardAt = saved }
}
