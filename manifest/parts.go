package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Part is the manifest of the files one node of a multi-node job holds for
// a step: the same entries as a Manifest, plus which node wrote it. A step
// of an N-node job is committed by merging the N parts into its manifest.
type Part struct {
	// Format is the format version, "major.minor".
	Format string `json:"format"`
	// Step is the training step.
	Step int64 `json:"step"`
	// NodeRank is the node that wrote the part, 0..Nodes-1.
	NodeRank int `json:"node_rank"`
	// Nodes is the number of nodes of the job.
	Nodes int `json:"nodes"`
	// Run is the job incarnation the part belongs to (PartSet.Run).
	Run string `json:"run,omitempty"`
	// Layout is the layout the node detected (Manifest.Layout).
	Layout string `json:"layout,omitempty"`
	// Created is when the part was written (UTC).
	Created time.Time `json:"created"`
	// Files lists the node's regular files.
	Files []File `json:"files"`
	// Symlinks lists the node's links inside the checkpoint.
	Symlinks []Symlink `json:"symlinks,omitempty"`
	// Expect is what the framework's record, as this node read it, says
	// the whole step holds (files of other nodes included); the merge
	// refuses a union of parts that disagrees (CheckExpected).
	Expect []Expected `json:"expect,omitempty"`
}

// Set returns the set the part belongs to.
func (p *Part) Set() PartSet { return PartSet{Step: p.Step, Nodes: p.Nodes, Run: p.Run} }

// AsManifest views the part as a manifest, for validation and comparison.
func (p *Part) AsManifest() *Manifest {
	return &Manifest{Format: p.Format, Step: p.Step, Created: p.Created, Files: p.Files, Symlinks: p.Symlinks}
}

// ValidatePart checks a part manifest as strictly as Validate checks a
// manifest, and its node fields.
func ValidatePart(p *Part, prefix string) error {
	if p.Nodes < 1 || p.Nodes > MaxNodes {
		return fmt.Errorf("part manifest field nodes: %d outside 1..%d", p.Nodes, MaxNodes)
	}
	if p.NodeRank < 0 || p.NodeRank >= p.Nodes {
		return fmt.Errorf("part manifest field node_rank: %d outside 0..%d", p.NodeRank, p.Nodes-1)
	}
	if err := CheckRun(p.Run); err != nil {
		return fmt.Errorf("part manifest field run: %w", err)
	}
	if err := Validate(p.AsManifest(), prefix); err != nil {
		return fmt.Errorf("part manifest of node %d: %w", p.NodeRank, err)
	}
	if err := validateExpected(p.Expect); err != nil {
		return fmt.Errorf("part manifest of node %d: %w", p.NodeRank, err)
	}
	return nil
}

// EncodePart returns the part as indented JSON with a trailing newline.
// Packed files make it format 3, as in Encode.
func EncodePart(p *Part) ([]byte, error) {
	if f := FormatFor(p.Format, p.Files); f != p.Format {
		c := *p
		c.Format = f
		p = &c
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode part manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// DecodePart parses and validates a part manifest.
func DecodePart(data []byte, prefix string) (*Part, error) {
	var probe struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("part manifest is not valid JSON: %w", err)
	}
	if err := checkFormat(probe.Format); err != nil {
		return nil, err
	}
	var p Part
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("part manifest is not valid JSON: %w", err)
	}
	if err := ValidatePart(&p, prefix); err != nil {
		return nil, err
	}
	return &p, nil
}

// MergeParts builds the manifest of a step from all its nodes' parts. The
// result depends only on the parts' content, not on their order or on who
// merges: files and symlinks are sorted by path, created is the latest
// part's, nodes is N. A path held by several nodes is accepted when they
// agree on its content (shared files that every node writes, such as a
// config saved on each node) and taken from the lowest node rank; different
// content fails, naming both nodes.
func MergeParts(parts []*Part) (*Manifest, error) {
	if len(parts) == 0 {
		return nil, errors.New("merge parts: no parts")
	}
	sorted := append([]*Part(nil), parts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].NodeRank < sorted[j].NodeRank })
	first := sorted[0]
	m := &Manifest{Format: FormatVersion, Step: first.Step, Nodes: first.Nodes}
	type owned struct {
		node int
		file File
	}
	files := map[string]owned{}
	links := map[string]owned{}
	var created time.Time
	for i, p := range sorted {
		if p.Set() != first.Set() || p.NodeRank != i || p.Nodes != len(sorted) {
			return nil, fmt.Errorf("merge parts of %s: part %d is node %d of %s; want node %d of %d",
				first.Set(), i, p.NodeRank, p.Set(), i, len(sorted))
		}
		if p.Created.After(created) {
			created = p.Created
		}
		for _, f := range p.Files {
			if o, dup := files[f.Path]; dup {
				if o.file.Size != f.Size || o.file.BLAKE3 != f.BLAKE3 {
					return nil, fmt.Errorf("commit step %d: nodes %d and %d both hold %s with different content", p.Step, o.node, p.NodeRank, f.Path)
				}
				continue
			}
			files[f.Path] = owned{p.NodeRank, f}
			m.Files = append(m.Files, f)
		}
		for _, s := range p.Symlinks {
			if o, dup := links[s.Path]; dup {
				if o.file.Key != s.Target {
					return nil, fmt.Errorf("commit step %d: nodes %d and %d both hold link %s with different targets", p.Step, o.node, p.NodeRank, s.Path)
				}
				continue
			}
			links[s.Path] = owned{p.NodeRank, File{Key: s.Target}}
			m.Symlinks = append(m.Symlinks, s)
		}
	}
	m.Created = created
	m.Layout = first.Layout
	for _, p := range sorted {
		if p.Layout != first.Layout {
			m.Layout = "" // nodes disagree: unknown
		}
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	sort.Slice(m.Symlinks, func(i, j int) bool { return m.Symlinks[i].Path < m.Symlinks[j].Path })
	m.Format = FormatFor(m.Format, m.Files)
	var exp []Expected
	for _, p := range sorted {
		exp = append(exp, p.Expect...)
	}
	if err := CheckExpected(m.Step, m.Files, exp); err != nil {
		return nil, fmt.Errorf("merge parts of %s: %w", first.Set(), err)
	}
	return m, nil
}
