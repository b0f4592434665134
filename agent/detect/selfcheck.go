package detect

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// A file's own evidence. Some formats end with a record written after
// every byte before it, so a file cut short shows it whatever its writer
// did on the way out (a killed process's descriptors are closed by the
// kernel, which looks like a normal close):
//
//   - torch.save (since PyTorch 1.6) writes a zip archive: its end of
//     central directory record is the last thing written, and points back
//     at the central directory. A file that starts like a zip archive but
//     has no such record at its end, or one that does not point where it
//     should, is torn.
//   - safetensors starts with the length of a JSON header that gives every
//     tensor's byte range: a complete file ends exactly where the last
//     range ends.
//   - A "*.json" file (HF's trainer_state.json, a safetensors index,
//     Megatron's metadata.json, NeMo's context) is one JSON object or
//     array, which json.dump writes front to back: an empty one, or one
//     that starts as an object or array and does not parse whole, is cut
//     short (up to maxJSONCheck bytes; larger ones, and other contents,
//     make no claim).
//
// A step holding a torn file waits, whatever its marker says (a marker
// left from an earlier save, or a DeepSpeed rank killed after rank 0
// wrote latest). Other formats make no claim here.

const (
	zipLocalMagic = "PK\x03\x04"
	zipEndMagic   = "PK\x05\x06"
	zipEndLen     = 22
	// zip64LocatorMagic starts the 20-byte zip64 end of central directory
	// locator, which sits just before the classic end record.
	zip64LocatorMagic = "PK\x06\x07"
	zip64LocatorLen   = 20
	zipMaxComment     = 0xffff
	// maxSafetensorsHeader bounds the header read: real headers are
	// kilobytes to a few megabytes.
	maxSafetensorsHeader = 64 << 20
	// maxJSONCheck bounds the JSON documents parsed whole: a trainer state
	// with a long log history is a few megabytes.
	maxJSONCheck = 64 << 20
)

// torchName matches the names of files torch.save and safetensors write.
var torchName = regexp.MustCompile(`(?i)\.(?:pt|pth|pth\.tar|ckpt|safetensors)$`)

// tornReason returns why the file at rel (below t's root, opened as the
// uploader opens it: confined, following no link) is cut short by its own
// format's rules, or "" when it is whole or its format says nothing.
// Errors opening it are not reported here (the readability check does).
func tornReason(t *Tree, rel string) string {
	f, st, err := t.openRegular(rel)
	if err != nil {
		return ""
	}
	defer f.Close()
	name, size := rel, st.Size
	if strings.HasSuffix(name, ".json") {
		return jsonTorn(f, size)
	}
	head := make([]byte, 8)
	if n, _ := io.ReadFull(f, head); n < len(head) {
		switch {
		case n >= 4 && string(head[:4]) == zipLocalMagic:
			return "it is cut short (a zip archive, as torch.save writes, without its end record)"
		case n == 0 && torchName.MatchString(name):
			// No torch.save or safetensors file is empty: this one's
			// writer truncated it and died before its first write.
			return "it is empty (no torch.save or safetensors file is): its writer truncated it and wrote nothing"
		}
		return ""
	}
	switch {
	case strings.HasSuffix(name, ".distcp"):
		// A DCP shard is a run of zip archives and raw storage, not one
		// archive: its end says nothing; .metadata vouches for it.
		return ""
	case string(head[:4]) == zipLocalMagic:
		return zipTorn(f, size)
	case strings.HasSuffix(name, ".safetensors"):
		return safetensorsTorn(f, size, binary.LittleEndian.Uint64(head))
	}
	return ""
}

// jsonTorn checks that a JSON file holds one whole JSON document.
func jsonTorn(f *os.File, size int64) string {
	if size > maxJSONCheck {
		return ""
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return ""
	}
	if size == 0 {
		return "it is empty (json.dump writes at least {} or []): its writer truncated it and wrote nothing"
	}
	// Only what starts as a JSON object or array makes a claim: json.dump
	// of a dict or list, what frameworks write.
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') && !json.Valid(data) {
		return "it is not one whole JSON document (cut short: json.dump writes front to back)"
	}
	return ""
}

// zipTorn checks a zip archive's end of central directory record.
func zipTorn(f *os.File, size int64) string {
	const torn = "it is cut short (a zip archive, as torch.save writes, without its end record)"
	if size < zipEndLen {
		return torn
	}
	n := min(size, zipEndLen+zipMaxComment)
	tail := make([]byte, n)
	if _, err := f.ReadAt(tail, size-n); err != nil {
		return ""
	}
	for i := len(tail) - zipEndLen; i >= 0; i-- {
		if string(tail[i:i+4]) != zipEndMagic {
			continue
		}
		comment := int(binary.LittleEndian.Uint16(tail[i+20:]))
		if i+zipEndLen+comment != len(tail) {
			continue
		}
		cdSize := int64(binary.LittleEndian.Uint32(tail[i+12:]))
		cdOffset := int64(binary.LittleEndian.Uint32(tail[i+16:]))
		end := size - n + int64(i)
		if cdOffset == 0xffffffff || cdSize == 0xffffffff {
			return "" // zip64: the record's presence at the end is the evidence
		}
		if i >= zip64LocatorLen && string(tail[i-zip64LocatorLen:i-zip64LocatorLen+4]) == zip64LocatorMagic {
			// torch 2.x always writes a zip64 end record and its locator
			// before the classic one: the central directory ends where
			// the zip64 record, which the locator points at, begins.
			end = int64(binary.LittleEndian.Uint64(tail[i-zip64LocatorLen+8:]))
		}
		if cdOffset+cdSize != end {
			return fmt.Sprintf("its zip end record points at a central directory ending at byte %d, not at %d where the record is", cdOffset+cdSize, end)
		}
		return ""
	}
	return torn
}

// safetensorsTorn checks that a safetensors file ends where its header's
// last tensor does.
func safetensorsTorn(f *os.File, size int64, headerLen uint64) string {
	if headerLen == 0 || headerLen > maxSafetensorsHeader {
		return "" // not a header we understand: no claim
	}
	if int64(8+headerLen) > size {
		return fmt.Sprintf("it is cut short (a safetensors header of %d bytes in a file of %d)", headerLen, size)
	}
	raw := make([]byte, headerLen)
	if _, err := f.ReadAt(raw, 8); err != nil {
		return ""
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(raw, " "), &header); err != nil {
		return ""
	}
	var end uint64
	for name, v := range header {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			Offsets []uint64 `json:"data_offsets"`
		}
		if json.Unmarshal(v, &t) == nil && len(t.Offsets) == 2 {
			end = max(end, t.Offsets[1])
		}
	}
	if want := int64(8 + headerLen + end); want != size {
		return fmt.Sprintf("it is %d bytes where its safetensors header says %d", size, want)
	}
	return ""
}

// tornFile returns the first file of c cut short by its own format, with
// the reason, using the engine's cache so an unchanged file is read once.
func (e *engine) tornFile(c *Candidate) (string, string) {
	for _, f := range c.Step.Files {
		if why, _ := e.torn.reason(e.tree, f.RelPath, f.Size, f.ModTime); why != "" {
			return f.RelPath, why
		}
	}
	return "", ""
}

// tornCache holds tornReason's verdicts by file path, size and time, so an
// unchanged file is read once. It forgets the verdicts of files no longer
// in the tree as they were (deleted, rewritten) whenever it has doubled
// since it last did: it holds about the files on disk, not every file ever
// seen (make soak: 1 MB more for every 1,000 small steps otherwise).
type tornCache struct {
	verdicts map[stat]string
	sweepAt  int
}

// reason returns tornReason for the file at path with that size and time,
// and whether it was read now rather than remembered.
func (c *tornCache) reason(t *Tree, path string, size int64, modTime time.Time) (why string, read bool) {
	if c.verdicts == nil {
		c.verdicts = map[stat]string{}
	}
	if len(c.verdicts) > c.sweepAt {
		c.sweep(t)
	}
	key := stat{path, size, modTime.UnixNano()}
	why, ok := c.verdicts[key]
	if !ok {
		why = tornReason(t, path)
		c.verdicts[key] = why
	}
	return why, !ok
}

func (c *tornCache) sweep(t *Tree) {
	for k := range c.verdicts {
		if ent, ok := t.Get(k.path); !ok || ent.Size != k.size || ent.ModTime.UnixNano() != k.modTime {
			delete(c.verdicts, k)
		}
	}
	c.sweepAt = max(1024, 2*len(c.verdicts))
}
