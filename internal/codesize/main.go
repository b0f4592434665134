// Command codesize fails when non-test Go code outgrows the limits of
// CONTRIBUTING.md: a function over 80 lines (from its func line to its
// closing brace, function literals inside it included) or a file over
// 15,000 characters. `make lint` runs it over the files git tracks:
//
//	go run ./internal/codesize [folder or file ...]   # default: .
//
// It names every offender, one a line, and exits 1 if there is one.
// Folders are walked (symbolic links are not followed); what Go leaves out
// of ./... is left out here too (testdata, vendor, folders starting with a
// dot or an underscore), and so are _test.go files and generated files
// ("Code generated ... DO NOT EDIT.").
package main

import (
	"fmt"
	"os"
)

// Limits of non-test code (CONTRIBUTING.md, "Code habits").
const (
	maxFuncLines = 80
	maxFileChars = 15000
)

// allowed are known offenders another branch is shrinking, each with the
// reason; an entry that no longer offends is reported so that it is
// removed. Keys are "path:func" (receiver types as in the report).
var allowed = map[string]string{}

func main() {
	roots := os.Args[1:]
	if len(roots) == 0 {
		roots = []string{"."}
	}
	offences, err := check(roots, allowed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codesize:", err)
		os.Exit(2)
	}
	for _, o := range offences {
		fmt.Println(o)
	}
	if len(offences) > 0 {
		fmt.Fprintf(os.Stderr, "codesize: %d offender(s): split them along a real seam (a function per stage, a file per concern)\n", len(offences))
		os.Exit(1)
	}
}
