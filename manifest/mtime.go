package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"time"
)

// A file's modification time. The writer records the time of the stat the
// file was hashed under (the one that vouched for the bytes), so that a
// restore can put the step back as the trainer left it: an agent started on
// the restored folder reads a framework's marker as written after its
// shards, as it was (agent/detect's fresh-marker rule), and its journal
// recognises files it committed itself.
//
// In JSON it is an RFC 3339 string with nanoseconds, in UTC, as "created"
// is: an integer of nanoseconds would exceed 2^53, which readers whose
// numbers are doubles (JavaScript, jq 1.6) round, and every other number
// of the format stays below it. In Go it is the nanoseconds since the Unix
// epoch, so that a round trip compares exactly.

// NanoTime is a file's modification time in nanoseconds since the Unix
// epoch, 0 when not recorded. JSON: an RFC 3339 string (Manifest.Files'
// "mtime").
type NanoTime int64

// badTime marks a JSON mtime that is not an RFC 3339 time in range, for
// Validate to name the field (json.Unmarshal's own error would not).
const badTime NanoTime = math.MinInt64

// TimeOf returns t as a NanoTime: 0 (not recorded) for a time at or before
// the Unix epoch or past the range of int64 nanoseconds (2262-04-11), which
// the format does not hold.
func TimeOf(t time.Time) NanoTime {
	if t.IsZero() || !t.After(time.Unix(0, 0)) || t.After(time.Unix(0, math.MaxInt64)) {
		return 0
	}
	return NanoTime(t.UnixNano())
}

// Recorded reports whether the time was recorded.
func (t NanoTime) Recorded() bool { return t > 0 }

// Time returns the time in UTC; the zero time.Time when not recorded.
func (t NanoTime) Time() time.Time {
	if !t.Recorded() {
		return time.Time{}
	}
	return time.Unix(0, int64(t)).UTC()
}

// MarshalJSON writes the time as an RFC 3339 string in UTC with as many
// fraction digits as it needs (time.RFC3339Nano).
func (t NanoTime) MarshalJSON() ([]byte, error) {
	if t < 0 {
		return nil, fmt.Errorf("mtime %d: before 1970", int64(t))
	}
	b := make([]byte, 0, len(`"2006-01-02T15:04:05.999999999Z"`))
	b = append(b, '"')
	b = time.Unix(0, int64(t)).UTC().AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// UnmarshalJSON reads an RFC 3339 string, strictly (time.Time's own
// parser), at any UTC offset. null leaves the time unrecorded. A string
// that is not such a time, or one outside 1970-01-01 .. 2262-04-11, is
// kept as badTime for Validate to refuse; a value of another JSON type is
// an error here.
func (t *NanoTime) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	if len(data) < 2 || data[0] != '"' {
		return &json.UnmarshalTypeError{Value: "non-string", Type: timeType}
	}
	s := data[1 : len(data)-1]
	if bytes.IndexByte(s, '\\') >= 0 { // escapes: let the decoder unquote it
		var str string
		if err := json.Unmarshal(data, &str); err != nil {
			return err
		}
		s = []byte(str)
	}
	var tm time.Time
	if err := tm.UnmarshalText(s); err != nil {
		*t = badTime
		return nil
	}
	if *t = TimeOf(tm); *t == 0 && !tm.Equal(time.Unix(0, 0)) {
		*t = badTime
	}
	return nil
}

var timeType = reflect.TypeFor[NanoTime]()

// checkMTime refuses a time Validate cannot accept: one read as badTime,
// or a negative one a writer built.
func checkMTime(t NanoTime) error {
	if t < 0 {
		return fmt.Errorf("not an RFC 3339 time from 1970-01-01 to 2262-04-11")
	}
	return nil
}
