package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves the flags of cmd found after its positional arguments
// (`ferry push DIR --to ...`) in front of them, as urfave/cli stops at the
// first positional argument. A flag that takes a value keeps the token after
// it, so `--step -3` stays a flag and its value. "--" ends the flags.
func flagsFirst(cmd *cli.Command, args []string) []string {
	takes := map[string]bool{}
	for _, f := range cmd.Flags {
		tv, ok := f.(interface{ TakesValue() bool })
		for _, n := range f.Names() {
			takes[n] = ok && tv.TakesValue()
		}
	}
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && takes[name] && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(flags, pos...)
}

// urfave/cli's usage errors, rewritten by explainUsage.
var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	badFlagValue  = regexp.MustCompile(`^invalid value "(.*)" for flag -+([^:]+):`)
	badEnvValue   = regexp.MustCompile(`^could not parse "(.*)" as \w+ value from environment variable "([^"]+)" for flag ([^:]+):`)
)

// explainUsage rewrites urfave/cli's usage errors for cmd: an unknown flag
// names the closest flag of the command, a bad value says what is wanted.
func explainUsage(cmd *cli.Command, err error) error {
	msg := err.Error()
	if cmd == nil {
		return usageError{msg: msg}
	}
	if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("unknown flag --%s", m[1])
		if best := closestFlag(cmd, m[1]); best != "" {
			msg += fmt.Sprintf(": did you mean --%s?", best)
		}
	} else if m := badFlagValue.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("--%s %q: %s", m[2], m[1], wantedValue(findFlag(cmd, m[2])))
	} else if m := badEnvValue.FindStringSubmatch(msg); m != nil {
		msg = fmt.Sprintf("%s=%q (--%s): %s", m[2], m[1], m[3], wantedValue(findFlag(cmd, m[3])))
	}
	return usageError{msg: msg}
}

func findFlag(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// wantedValue says what a flag's value must look like.
func wantedValue(f cli.Flag) string {
	switch f.(type) {
	case *cli.DurationFlag:
		return "want a duration with a unit, e.g. 30s, 5m or 1h"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag:
		return "want a whole number"
	case *cli.BoolFlag:
		return "want true or false"
	}
	return "not a valid value"
}

// closestFlag returns the flag of cmd nearest to name (edit distance at
// most a third of its length, or name a prefix of it), or "".
func closestFlag(cmd *cli.Command, name string) string {
	best, bestD := "", len(name)/3+1
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if len(n) < 2 {
				continue
			}
			d := editDistance(name, n)
			if strings.HasPrefix(n, name) {
				d = min(d, 1)
			}
			if d < bestD || (d == bestD && best == "") {
				best, bestD = n, d
			}
		}
	}
	if bestD > len(name)/3+1 {
		return ""
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (adjacent swaps count
// one, so "stpe" is one from "step").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
