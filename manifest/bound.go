package manifest

import (
	"bytes"
	"fmt"
)

// maxDepth is the deepest nesting checkArrayLengths follows; encoding/json
// refuses anything deeper than 10,000 levels anyway, and a manifest needs 3.
const maxDepth = 10_000

// checkArrayLengths scans a manifest's JSON without decoding it, refuses
// any array of more than MaxFiles elements and returns the number of
// entries of the top-level "files" array (a capacity for the decoder). Validate counts entries only
// after the decoder has appended every one of them, and a three-byte "{},"
// becomes a File of about 70 bytes: without this check a 64 MiB manifest of
// empty entries made a reader allocate gigabytes. Malformed JSON is left to
// the decoder to report.
func checkArrayLengths(data []byte) (files int, err error) {
	var (
		counts    []int  // commas seen in each open array; -1 for an object
		lastStr   string // the last string closed directly in the top-level object
		field     string // the top-level field whose value is being scanned
		topObject bool
	)
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c == '"' {
			// Skip the string: find its closing quote, stepping over
			// escapes (most of a manifest is strings: paths, keys, hashes).
			start, end := i+1, stringEnd(data, i+1)
			if len(counts) == 1 && topObject {
				lastStr = string(data[start:min(end, start+64)])
			}
			i = end
			continue
		}
		switch c {
		case '{', '[':
			if len(counts) == maxDepth {
				return 0, fmt.Errorf("manifest is not valid JSON: nested more than %d levels deep", maxDepth)
			}
			if len(counts) == 0 {
				topObject = c == '{'
			}
			if len(counts) == 1 && topObject {
				field = lastStr
			}
			n := 0
			if c == '{' {
				n = -1
			}
			counts = append(counts, n)
		case '}', ']':
			if len(counts) == 2 && topObject && field == "files" && c == ']' {
				files = counts[1] + 1 // entries, for the decoder's capacity
			}
			if len(counts) > 0 {
				counts = counts[:len(counts)-1]
			}
		case ',':
			if len(counts) == 0 || counts[len(counts)-1] < 0 {
				continue
			}
			counts[len(counts)-1]++
			if counts[len(counts)-1] >= MaxFiles {
				name := field
				if name == "" {
					name = "(top level)"
				}
				return 0, fmt.Errorf("manifest field %s: more than %d entries", name, MaxFiles)
			}
		}
	}
	return files, nil
}

// stringEnd returns the index of the quote that closes the string whose
// first byte is at start, or len(data) if it is not closed.
func stringEnd(data []byte, start int) int {
	for j := start; j < len(data); {
		k := bytes.IndexAny(data[j:], "\"\\")
		if k < 0 {
			return len(data)
		}
		if data[j+k] == '"' {
			return j + k
		}
		j += k + 2 // a backslash and the byte it escapes
	}
	return len(data)
}
