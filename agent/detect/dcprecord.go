package detect

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/dcprecord"
)

// The record rule. DCP's .metadata is not only the marker that every rank
// finished: it records every storage file of the folder and where each
// item lies in it (internal/dcprecord). A folder whose .metadata can be
// read is complete when every file it names is here with the size its
// last item ends at; a file of another size is torn or being rewritten,
// and a missing one is lost (or, on a node of a multi-node job, another
// node's, checked at the merge). Only the files it names are the marker's
// to vouch for: files written after it beside them (NeMo's
// weights/metadata.json, written after weights/.metadata) do not make it
// stale. A record that cannot be read falls back to the timing rules
// (fresh marker, settled folder) with one warning.

// recordKey identifies one version of a record file: a new save replaces
// the file (a new inode) or at least its size and time.
type recordKey struct {
	path     string
	dev, ino uint64
	size     int64
	mtime    int64
}

// maxRecordsCached bounds a recordCache: one entry per record on disk is
// enough, older versions are dropped first by a full reset.
const maxRecordsCached = 256

// recordCache holds what was read from each version of a framework's
// record files (DCP's .metadata, HF's index), so that each is read once
// per version, however often the step is evaluated.
type recordCache[T any] struct{ m map[recordKey]T }

// get returns the value read from e's version, reading it with read the
// first time; first reports that it was read now (to warn once).
func (c *recordCache[T]) get(e Entry, read func() T) (v T, first bool) {
	key := recordKey{e.Path, e.id.dev, e.id.ino, e.Size, e.ModTime.UnixNano()}
	if v, ok := c.m[key]; ok {
		return v, false
	}
	v = read()
	if c.m == nil || len(c.m) >= maxRecordsCached {
		c.m = map[recordKey]T{}
	}
	c.m[key] = v
	return v, true
}

type recordRead struct {
	rec dcprecord.Record
	err error
}

// dcpRecords reads and applies DCP's .metadata records for a layout
// whose steps hold DCP folders (dcp, Megatron's torch_dist, Composer's
// sharded checkpoints).
type dcpRecords struct {
	log *zap.Logger
	// multiNode: the job has several nodes, so a file the record names
	// may be another node's.
	multiNode bool
	records   recordCache[recordRead]
}

// record returns the parsed .metadata at m, reading it once per version;
// ok is false when it cannot be read (warned once per version).
func (l *dcpRecords) record(t *Tree, m Entry) (dcprecord.Record, bool) {
	r, first := l.records.get(m, func() recordRead { return l.readRecord(t, m) })
	if first && r.err != nil && !errors.Is(r.err, errRecordChanged) && l.log != nil {
		l.log.Warn("DCP .metadata not read as a record of the step; its completion falls back to the marker's timing rules",
			zap.String("file", m.Path), zap.Int64("bytes", m.Size), zap.Error(r.err))
	}
	return r.rec, r.err == nil
}

// errRecordChanged is a .metadata that changed while it was read: a save
// replacing it. The next evaluation reads the new one.
var errRecordChanged = errors.New("changed while read")

func (l *dcpRecords) readRecord(t *Tree, m Entry) recordRead {
	data, err := readWhole(t, m, dcprecord.MaxSize)
	if err != nil {
		return recordRead{err: err}
	}
	rec, err := dcprecord.Parse(data)
	return recordRead{rec: rec, err: err}
}

// readWhole reads the regular file the scan saw as m, beneath the root and
// following no link, if it is at most max bytes and still the version the
// scan saw (errRecordChanged otherwise).
func readWhole(t *Tree, m Entry, max int64) ([]byte, error) {
	if m.Size > max {
		return nil, fmt.Errorf("%d bytes, more than the %d read", m.Size, max)
	}
	f, st, err := t.openRegular(m.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size != m.Size || !st.ModTime.Equal(m.ModTime) {
		return nil, errRecordChanged
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != m.Size {
		return nil, errRecordChanged
	}
	return data, nil
}

// requireRecorded checks the files of dir against its record: each file
// it names is here with its recorded size (on a node of a multi-node job,
// or absent: another node's). It adds the record's expectations to the
// step, for the uploader and the merge to check what is committed.
func (l *dcpRecords) requireRecorded(t *Tree, c *Candidate, dir string, marker Entry, rec dcprecord.Record) {
	if unvouched(t, dir, rec) != "" {
		c.Proof = ProofNone
	}
	l.checkRecorded(t, c, dir, marker, rec)
}

// checkRecorded adds the record's expectations to c and, if c is
// finished, makes it unfinished while a file the record names is missing
// or of another size.
func (l *dcpRecords) checkRecorded(t *Tree, c *Candidate, dir string, marker Entry, rec dcprecord.Record) {
	names := rec.Names()
	for _, name := range names {
		p := dir + "/" + name
		c.Step.Expect = append(c.Step.Expect, Expected{RelPath: p, Size: rec.Sizes[name], Record: marker.Path})
	}
	if !c.Finished {
		return
	}
	for _, name := range names {
		p, want := dir+"/"+name, rec.Sizes[name]
		e, ok := t.Get(p)
		switch {
		case !ok && l.multiNode:
			continue // another node's file: the merge checks the union
		case !ok:
			c.Finished, c.Waiting = false, fmt.Sprintf("record: %s names %s (%d bytes), which is not here", marker.Path, p, want)
		case !e.IsRegular():
			c.Finished, c.Waiting = false, fmt.Sprintf("record: %s names %s, which is not a regular file", marker.Path, p)
		case e.Size != want:
			c.Finished, c.Disagrees = false, true
			c.Waiting = fmt.Sprintf("record: %s is %d bytes, %s records %d: torn, or saved again after its record", p, e.Size, marker.Path, want)
		default:
			continue
		}
		return
	}
}

// unvouched returns a file of dir that its record neither names nor is
// (other than an unnamed, empty-by-design .distcp of a rank with nothing
// to write): written beside the DCP save, by the trainer, after it
// (Lightning's sharded FSDP and ModelParallel save write rank 0's meta.pt
// after dcp.save returns; NeMo 2 writes weights/metadata.json), so the
// record proves nothing about it and the settle window decides. "" when
// every file is the record's.
func unvouched(t *Tree, dir string, rec dcprecord.Record) string {
	for _, e := range t.Children(dir) {
		name := e.Name()
		if e.IsDir() || name == dcpMetadata || strings.HasSuffix(name, ".distcp") {
			continue
		}
		if _, named := rec.Sizes[name]; !named {
			return e.Path
		}
	}
	return ""
}

// recordedUnder returns a covers function for requireFresh: the files of
// dir that rec names.
func recordedUnder(dir string, rec dcprecord.Record) func(File) bool {
	under := dir + "/"
	return func(f File) bool {
		name, ok := strings.CutPrefix(f.RelPath, under)
		if !ok {
			return false
		}
		_, named := rec.Sizes[name]
		return named
	}
}

// sortExpected orders a merged step's expectations by path.
func sortExpected(exp []Expected) {
	sort.Slice(exp, func(i, j int) bool { return exp[i].RelPath < exp[j].RelPath })
}
