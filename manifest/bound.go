package manifest

import "fmt"

// maxDepth is the deepest nesting checkArrayLengths follows; encoding/json
// refuses anything deeper than 10,000 levels anyway, and a manifest needs 3.
const maxDepth = 10_000

// checkArrayLengths scans a manifest's JSON without decoding it and refuses
// any array of more than MaxFiles elements. Validate counts entries only
// after the decoder has appended every one of them, and a three-byte "{},"
// becomes a File of about 70 bytes: without this check a 64 MiB manifest of
// empty entries made a reader allocate gigabytes. Malformed JSON is left to
// the decoder to report.
func checkArrayLengths(data []byte) error {
	var (
		counts    []int // commas seen in each open array; -1 for an object
		inStr     bool
		esc       bool
		strStart  int
		lastStr   string // the last string closed directly in the top-level object
		field     string // the top-level field whose value is being scanned
		topObject bool
	)
	for i, c := range data {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
				if len(counts) == 1 && topObject {
					lastStr = string(data[strStart:min(i, strStart+64)])
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr, strStart = true, i+1
		case '{', '[':
			if len(counts) == maxDepth {
				return fmt.Errorf("manifest is not valid JSON: nested more than %d levels deep", maxDepth)
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
				return fmt.Errorf("manifest field %s: more than %d entries", name, MaxFiles)
			}
		}
	}
	return nil
}
