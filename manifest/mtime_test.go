package manifest

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// A file's mtime survives Encode and DecodeBytes to the nanosecond, is
// written as an RFC 3339 string in UTC, and is left out when not recorded.
func TestMTimeRoundTrip(t *testing.T) {
	m := valid()
	at := time.Date(2026, 12, 2, 15, 57, 43, 987654321, time.UTC)
	m.Files[0].MTime = TimeOf(at)
	m.Files[1].MTime = TimeOf(at.Add(time.Nanosecond))
	data, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"format": "1.4"`, `"mtime": "2026-12-02T15:57:43.987654321Z"`, `"mtime": "2026-12-02T15:57:43.987654322Z"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("encoded manifest lacks %s:\n%s", want, data)
		}
	}
	got, err := DecodeBytes(data, "run")
	if err != nil {
		t.Fatal(err)
	}
	if got.Files[0].MTime != NanoTime(at.UnixNano()) || !got.Files[1].MTime.Time().Equal(at.Add(time.Nanosecond)) {
		t.Fatalf("mtimes after the round trip: %d, %v; want %d and 1 ns later", got.Files[0].MTime, got.Files[1].MTime.Time(), at.UnixNano())
	}
	// Not recorded: no field at all, so that a 1.3 reader's document is
	// what it always was.
	m.Files[0].MTime, m.Files[1].MTime = 0, 0
	if data, _ = Encode(m); bytes.Contains(data, []byte("mtime")) {
		t.Fatalf("an unrecorded mtime is written:\n%s", data)
	}
	// A part carries its files' times, and a merge keeps them.
	p := &Part{Format: FormatVersion, Step: 1000, NodeRank: 0, Nodes: 1, Created: m.Created, Files: valid().Files}
	p.Files[1].MTime = TimeOf(at)
	pd, err := EncodePart(p)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := DecodePart(pd, "run")
	if err != nil {
		t.Fatal(err)
	}
	merged, err := MergeParts([]*Part{dp})
	if err != nil {
		t.Fatal(err)
	}
	if merged.Files[1].Path != "sub/big.bin" || merged.Files[1].MTime != TimeOf(at) {
		t.Fatalf("merged manifest lost the part's mtime: %+v", merged.Files)
	}
}

// An old manifest (no mtime) decodes with every time unrecorded, and an
// mtime never makes two manifests different content.
func TestMTimeOptional(t *testing.T) {
	old := []byte(`{"format":"1.3","step":1000,"created":"2026-12-02T15:57:44.123Z","files":[{"path":"a","size":1,"blake3":"` +
		hashA + `","key":"run/data/000000001000/x/a","part_size":0}]}`)
	m, err := DecodeBytes(old, "run")
	if err != nil {
		t.Fatal(err)
	}
	if m.Files[0].MTime.Recorded() || !m.Files[0].MTime.Time().IsZero() {
		t.Fatalf("an old manifest's file has a time: %d", m.Files[0].MTime)
	}
	n := *m
	n.Files = []File{m.Files[0]}
	n.Files[0].MTime = TimeOf(time.Now())
	if !SameContent(m, &n) || !Contains(m, &n) {
		t.Fatal("an mtime alone made two manifests differ in content")
	}
}

// TimeOf keeps what the format holds and gives 0 (unrecorded) for the
// rest; Validate refuses a negative time a writer built by hand.
func TestTimeOfBounds(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want NanoTime
	}{
		{time.Time{}, 0},
		{time.Unix(0, 0), 0},
		{time.Unix(0, -1), 0},
		{time.Unix(0, 1), 1},
		{time.Unix(0, math.MaxInt64), math.MaxInt64},
		{time.Unix(0, math.MaxInt64).Add(time.Nanosecond), 0},
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
	} {
		if got := TimeOf(c.t); got != c.want {
			t.Errorf("TimeOf(%v) = %d, want %d", c.t, got, c.want)
		}
	}
	m := valid()
	m.Files[1].MTime = -5
	if err := Validate(m, "run"); err == nil || !strings.Contains(err.Error(), "files[1].mtime") {
		t.Fatalf("negative mtime: %v", err)
	}
	if _, err := json.Marshal(m.Files[1]); err == nil {
		t.Fatal("a negative mtime was encoded")
	}
}

// TestShardEstimate: the writer's estimate of a file entry must not be
// below what the entry takes in the document, every field at its widest,
// or a manifest estimated under 48 MiB could exceed the 64 MiB a reader
// accepts.
func TestShardEstimate(t *testing.T) {
	r := maxRank
	f := File{Path: "p", Size: MaxFileSize, BLAKE3: hashA, Key: "k", PartSize: MaxPartSize, Rank: &r,
		PackSize: MaxSinglePut, Offset: MaxSinglePut, MTime: TimeOf(time.Date(2026, 12, 2, 15, 57, 43, 987654321, time.UTC))}
	one, _ := json.MarshalIndent(&Manifest{Files: []File{f}}, "", "  ")
	two, _ := json.MarshalIndent(&Manifest{Files: []File{f, f}}, "", "  ")
	if entry := len(two) - len(one); entry > len(f.Path)+len(f.Key)+entryOverhead {
		t.Fatalf("a file entry takes %d bytes, the estimate %d", entry, len(f.Path)+len(f.Key)+entryOverhead)
	}
}

// TestMTimeDecode: what a reader takes from each JSON value of "mtime".
func TestMTimeDecode(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 57, 43, 500000000, time.UTC)
	for _, c := range []struct {
		json string
		want NanoTime
		err  bool
	}{
		{`"2026-12-02T15:57:43.5Z"`, TimeOf(at), false},
		{`"2026-12-02T16:57:43.500000000+01:00"`, TimeOf(at), false},
		{`"2026-12-02T15:57:43.5\u005a"`, TimeOf(at), false}, // escaped Z
		{`null`, 0, false},
		{`"1970-01-01T00:00:00Z"`, 0, false}, // the epoch: not recorded
		{`"1970-01-01T00:00:00.000000001Z"`, 1, false},
		{`""`, badTime, false},
		{`"2026-12-02T15:57:43"`, badTime, false}, // no offset
		{`"2026-12-02T25:57:43Z"`, badTime, false},
		{`"9999-12-31T23:59:59Z"`, badTime, false},
		{`1796313464123456789`, 0, true},
		{`true`, 0, true},
	} {
		var got NanoTime
		err := json.Unmarshal([]byte(c.json), &got)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: got %d, %v; want %d (error %v)", c.json, got, err, c.want, c.err)
		}
	}
}
