// Package manifest defines ferry's remote format: the commit manifest that
// makes a checkpoint step exist remotely, the object keys under a prefix, and
// the strict validation a reader applies before trusting a manifest.
//
// Layout under a prefix P (all keys slash-separated):
//
//	P/manifests/<inv>-<step>.json   committed manifest of a step
//	P/data/<step>/<attempt>/<path>  file objects written by one push attempt
//	P/parts/<step>/[run-<run>/]of-<N>/node-<K>.json
//	                                part manifest of node K of an N-node job
//	P/pruned/<inv>-<step>.json      tombstone of a manifest removed by prune
//
// <step> is the step zero-padded to 12 digits and <inv> is 999999999999-step,
// zero-padded likewise, so manifest keys list newest first: finding the
// latest committed step is one LIST request for one key, however long the
// history. The step is also in the manifest itself, and readers check the two
// agree.
//
// This package is the format alone and does no I/O: the types, their
// encoding and validation, the key layout, part manifests and their merge,
// and the shard documents of a sharded manifest. The protocol that writes
// and reads them in a bucket (create-only commit, revisions, node parts and
// the merge claim, listing history) is package internal/remote.
//
// It is ferry's supported public API: an outside program may read and check
// what ferry writes with it.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// FormatVersion is the version this package writes for a manifest that
// fits in one document; ShardedFormat (2.0) is written for one that does
// not. Readers accept 1.x and 2.x and reject other major versions. 1.1
// added the nodes field of a manifest and part manifests, 1.2 the layout
// field, 1.3 the revision field, 1.4 a file's mtime; older 1.x readers
// ignore fields they do not know. 1.x readers reject 2.0. A manifest with
// packed files (File.PackSize, see packs.go) is written as PackedFormat
// (3.0), sharded or not, which 1.x and 2.x readers reject with "upgrade
// ferry" rather than read a pack as one file. A file's mtime also appears
// in 2.0 shards and 3.0 documents without renumbering them: their readers
// ignore it, and every reader checks a shard's header for "2.0" exactly.
const FormatVersion = "1.4"

// MaxNodes is the largest number of nodes the part keys can represent.
const MaxNodes = 99_999

// MaxStep is the largest step number the key layout can represent.
const MaxStep = 999_999_999_999

// MaxManifestSize bounds how many bytes a reader accepts for one manifest.
const MaxManifestSize = 64 << 20

// Manifest is the commit record of one checkpoint step.
type Manifest struct {
	// Format is the format version, "major.minor".
	Format string `json:"format"`
	// Step is the training step this checkpoint belongs to.
	Step int64 `json:"step"`
	// Created is when the manifest was written (UTC).
	Created time.Time `json:"created"`
	// Files lists every regular file of the checkpoint.
	Files []File `json:"files"`
	// Symlinks lists links inside the checkpoint that point inside it.
	Symlinks []Symlink `json:"symlinks,omitempty"`
	// Nodes is the number of nodes whose part manifests were merged into
	// this one; 0 when one node wrote the manifest directly.
	Nodes int `json:"nodes,omitempty"`
	// Layout is the checkpoint layout the writer detected (agent/detect's
	// names: dcp, deepspeed, megatron, composer, hf, flat), "" when it did
	// not know (ferry push of a directory). Restore reads it rather than
	// guessing from file names where it decides (SelectForNode).
	Layout string `json:"layout,omitempty"`
	// Revision counts the times the step's manifest was replaced after
	// its commit (see remote.Revise): 0 for the version first committed. A
	// revision is the complete version of a step whose files changed on
	// disk after an earlier version was committed; it replaces that
	// version at the same key, so every reader, old ones included, takes
	// it.
	Revision int `json:"revision,omitempty"`
	// Shards, in a format 2 manifest, are the objects that hold its files
	// (see shards.go). remote.Get returns such a manifest with Files
	// filled in.
	Shards []Shard `json:"shards,omitempty"`
}

// File is one regular file of a checkpoint and the object holding its bytes.
type File struct {
	// Path is relative to the checkpoint root, slash-separated.
	Path string `json:"path"`
	// Size in bytes.
	Size int64 `json:"size"`
	// BLAKE3 is the lower-case hex BLAKE3-256 of the content, as b3sum prints it.
	BLAKE3 string `json:"blake3"`
	// Key is the full object key in the bucket.
	Key string `json:"key"`
	// PartSize is the multipart part size the object was uploaded with, or 0
	// for a single PUT.
	PartSize int64 `json:"part_size"`
	// Rank is the training rank the file belongs to, when the layout says;
	// nil for files shared by all ranks.
	Rank *int `json:"rank,omitempty"`
	// PackSize is the size of the object Key when the file is packed with
	// other small files into that one object (format 3), 0 when the file
	// is an object of its own.
	PackSize int64 `json:"pack_size,omitempty"`
	// Offset is where a packed file's Size bytes start in its pack; 0 for
	// a file that is an object of its own.
	Offset int64 `json:"offset,omitempty"`
	// MTime is the file's modification time as the writer saw it when it
	// hashed the file (format 1.4, see mtime.go); 0 when not recorded (an
	// older writer, or a file ferry synthesised). Restore gives the placed
	// file this time. It is not content: SameContent and Contains ignore it.
	MTime NanoTime `json:"mtime,omitempty"`
}

// Symlink is a symbolic link inside the checkpoint.
type Symlink struct {
	// Path of the link, relative to the checkpoint root.
	Path string `json:"path"`
	// Target as stored in the link, relative to the link's directory.
	Target string `json:"target"`
}

// TotalBytes returns the sum of all file sizes.
func (m *Manifest) TotalBytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Encode returns the manifest as indented JSON with a trailing newline.
// A manifest with packed files is written as format 3 whatever its Format
// says (see FormatFor).
func Encode(m *Manifest) ([]byte, error) {
	if f := FormatFor(m.Format, m.Files); f != m.Format {
		c := *m
		c.Format = f
		m = &c
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// Decode parses and validates a manifest read from r. prefix is the prefix
// the manifest was read under: every file key must lie inside it. Unknown
// fields are ignored (forward compatibility within a major version); an
// unknown major version is rejected.
func Decode(r io.Reader, prefix string) (*Manifest, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("manifest larger than %d bytes", MaxManifestSize)
	}
	return DecodeBytes(data, prefix)
}

// DecodeBytes is Decode over a byte slice.
func DecodeBytes(data []byte, prefix string) (*Manifest, error) {
	files, err := checkArrayLengths(data)
	if err != nil {
		return nil, err
	}
	// One pass: json.Unmarshal checks the whole document (trailing data
	// included) as it decodes. Only a document that does not decode is
	// probed for its format, so that a manifest of a newer major version
	// gets "upgrade ferry" rather than a JSON error.
	// Sized once: appending 100,000 entries to a growing slice costs more
	// than decoding them.
	m := Manifest{Files: make([]File, 0, files)}
	if err := json.Unmarshal(data, &m); err != nil {
		var probe struct {
			Format string `json:"format"`
		}
		if perr := json.Unmarshal(data, &probe); perr == nil {
			if ferr := checkFormat(probe.Format); ferr != nil {
				return nil, ferr
			}
		}
		return nil, fmt.Errorf("manifest is not valid JSON: %w", err)
	}
	if err := checkFormat(m.Format); err != nil {
		return nil, err
	}
	if m.Sharded() && len(m.Files) > 0 {
		return nil, fmt.Errorf("manifest field files: a sharded manifest lists its files in its shards, not inline")
	}
	if err := Validate(&m, prefix); err != nil {
		return nil, err
	}
	return &m, nil
}

// ErrNewerFormat is wrapped by the error of a manifest written in a
// format this ferry does not read: a newer ferry wrote it, and it is not
// damaged.
var ErrNewerFormat = errors.New("upgrade ferry")

func checkFormat(v string) error {
	major, _, _ := strings.Cut(v, ".")
	if v == "" {
		return fmt.Errorf("manifest field format: missing")
	}
	if major != "1" && major != "2" && major != "3" {
		return fmt.Errorf("manifest field format: version %q not supported (this ferry reads 1.x, 2.x and 3.x; %w)", v, ErrNewerFormat)
	}
	return nil
}

// SameContent reports whether two valid manifests (each path once, as
// Validate checks) describe the same checkpoint: the same file paths, sizes
// and hashes and the same symlinks. Object keys, part sizes, creation
// times and files' modification times may differ: a step saved again with
// the same bytes is the same step, and a revision is never written for a
// time alone.
func SameContent(a, b *Manifest) bool {
	// Paths are unique in a valid manifest: with as many entries on each
	// side, a containing b is the two being equal.
	return len(a.Files) == len(b.Files) && len(a.Symlinks) == len(b.Symlinks) && Contains(a, b)
}

// Contains reports whether every file and symlink of sub is in m with the
// same size and hash, or target: what a node checks of a step committed
// from several nodes' parts.
func Contains(m, sub *Manifest) bool {
	if m.Step != sub.Step {
		return false
	}
	files := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		files[f.Path] = f
	}
	for _, f := range sub.Files {
		o, ok := files[f.Path]
		if !ok || o.Size != f.Size || o.BLAKE3 != f.BLAKE3 {
			return false
		}
	}
	links := make(map[string]string, len(m.Symlinks))
	for _, s := range m.Symlinks {
		links[s.Path] = s.Target
	}
	for _, s := range sub.Symlinks {
		if t, ok := links[s.Path]; !ok || t != s.Target {
			return false
		}
	}
	return true
}
