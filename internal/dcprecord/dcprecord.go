// Package dcprecord reads what a PyTorch Distributed Checkpoint (DCP)
// step records about itself: the storage files its ".metadata" names and
// the size each must have.
//
// DCP's FileSystemWriter (torch/distributed/checkpoint/filesystem.py,
// torch 2.6) writes each rank's items one after another into its
// "__{rank}_{n}.distcp" files, recording for every item an _StorageInfo
// (relative_path, offset, length) in Metadata.storage_data, keyed by
// MetadataIndex; the coordinator pickles the Metadata into ".metadata"
// after every rank reported its writes. So a file the record names is
// whole when its size is the end of its last item, and the step is whole
// when every file it names is. A file the record does not name (a rank
// with nothing to write still creates an empty one) is not checked.
package dcprecord

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/ferrylabs/ferry/internal/pickle"
)

// MaxSize is the largest .metadata read: DCP records of the largest
// models are tens of MB; anything bigger is not read (callers fall back).
const MaxSize = 256 << 20

// Record is what a .metadata says about the step's storage files.
type Record struct {
	// Sizes maps each storage file the record names, relative to the
	// .metadata's folder, to the size it must have (the end of its last
	// item).
	Sizes map[string]int64
	// Items counts the storage items recorded.
	Items int
}

// Names returns the files the record names, sorted.
func (r Record) Names() []string {
	out := make([]string, 0, len(r.Sizes))
	for n := range r.Sizes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ErrNoStorageData says the record is a DCP Metadata without the storage
// map FileSystemWriter writes (another storage writer made it).
var ErrNoStorageData = errors.New("the record has no storage_data (not written by FileSystemWriter)")

const metadataClass = "torch.distributed.checkpoint.metadata.Metadata"

// Parse reads a .metadata's bytes.
func Parse(data []byte) (Record, error) {
	if len(data) > MaxSize {
		return Record{}, fmt.Errorf("%d bytes, more than the %d read", len(data), MaxSize)
	}
	if len(data) < 2 || data[0] != 0x80 {
		return Record{}, errors.New("not a pickle of protocol 2 or later, which torch writes (no 0x80 PROTO opcode first)")
	}
	v, err := pickle.Decode(data, pickle.DefaultLimits)
	if err != nil {
		return Record{}, err
	}
	md, ok := v.(*pickle.Object)
	if !ok || md.Class() != metadataClass {
		return Record{}, fmt.Errorf("not a DCP Metadata (a %s)", describe(v))
	}
	sd, ok := md.Attr("storage_data")
	if !ok || sd == nil {
		return Record{}, ErrNoStorageData
	}
	dict, ok := sd.(*pickle.Dict)
	if !ok {
		return Record{}, fmt.Errorf("storage_data is a %s, not a dict", describe(sd))
	}
	rec := Record{Sizes: map[string]int64{}, Items: len(dict.Items)}
	for i, it := range dict.Items {
		name, end, err := storageInfo(it.Value)
		if err != nil {
			return Record{}, fmt.Errorf("storage_data item %d: %w", i, err)
		}
		if cur, seen := rec.Sizes[name]; !seen || end > cur {
			rec.Sizes[name] = end
		}
	}
	return rec, nil
}

// storageInfo reads one _StorageInfo: the file and the end of the item.
func storageInfo(v any) (string, int64, error) {
	o, ok := v.(*pickle.Object)
	if !ok || !strings.HasSuffix(o.Class(), "._StorageInfo") {
		return "", 0, fmt.Errorf("a %s, not a _StorageInfo", describe(v))
	}
	rp, _ := o.Attr("relative_path")
	name, ok := rp.(string)
	if !ok || !cleanName(name) {
		return "", 0, fmt.Errorf("relative_path %q is not a file name beneath the step's folder", rp)
	}
	ov, _ := o.Attr("offset")
	lv, _ := o.Attr("length")
	off, ok1 := pickle.Int(ov)
	n, ok2 := pickle.Int(lv)
	if !ok1 || !ok2 || off < 0 || n < 0 || off > (1<<62) || n > (1<<62) {
		return "", 0, fmt.Errorf("%s: offset %v and length %v are not sizes", name, ov, lv)
	}
	return name, off + n, nil
}

// cleanName accepts a relative slash path with no "..", "." or empty
// element: FileSystemWriter names files in the step's folder.
func cleanName(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsAny(p, "\\\x00\n") {
		return false
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." || e == "." {
			return false
		}
	}
	return true
}

func describe(v any) string {
	if o, ok := v.(*pickle.Object); ok {
		if c := o.Class(); c != "" {
			return c
		}
		return "call"
	}
	return fmt.Sprintf("%T", v)
}
