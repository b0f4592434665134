package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// Help text shows one true default per flag. urfave/cli appends
// "(default: X)" to every flag's usage, bools included; ferry keeps it,
// except where the usage already says the default in words ("(default:
// the latest committed)"), where the flag is required, and where -1 is
// the "not given" sentinel (whose usage says what that means).
func init() {
	stock := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string { return oneDefault(f, stock(f)) }
}

// oneDefault drops the default urfave/cli appended to s, the help line of
// f, where it repeats or contradicts what the usage says.
func oneDefault(f cli.Flag, s string) string {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return s
	}
	usage := df.GetUsage()
	const mark = " (default: "
	if strings.Count(s, mark) <= strings.Count(usage, mark) {
		return s // urfave/cli added none
	}
	name := f.Names()[0]
	keep := name != "help" && name != "version" && df.GetDefaultText() != "-1" &&
		!strings.Contains(usage, "(default") && !strings.Contains(usage, "; default") && !strings.Contains(usage, "(required")
	if keep {
		return s
	}
	i := strings.LastIndex(s, mark)
	end := strings.Index(s[i+1:], ")")
	if end < 0 {
		return s
	}
	return s[:i] + s[i+1+end+1:]
}

// commandDoc is what a command's help says besides its flags: one
// paragraph, examples, the exit codes, and what the environment
// variables it shares with other commands mean for it.
type commandDoc struct {
	about    string
	examples []string
	exits    []string // "0 ...", "1 ...": the code first
	env      string
}

// helpWidth is where commandDoc wraps its paragraphs.
const helpWidth = 100

// String renders d as a command's Description (urfave/cli indents it).
func (d commandDoc) String() string {
	var b strings.Builder
	b.WriteString(wrapText(d.about, helpWidth))
	if d.env != "" {
		b.WriteString("\n\n" + wrapText(d.env, helpWidth))
	}
	if len(d.examples) > 0 {
		b.WriteString("\n\nExamples:")
		for _, e := range d.examples {
			b.WriteString("\n  " + e)
		}
	}
	if len(d.exits) > 0 {
		b.WriteString("\n\nExit codes:")
		for _, e := range d.exits {
			code, text, _ := strings.Cut(e, " ")
			b.WriteString(fmt.Sprintf("\n  %s  %s", code, wrapIndent(text, helpWidth-5, "     ")))
		}
	}
	return b.String()
}

// The exit codes every command shares (README's table).
const (
	exit1 = "1 failure: the message names what failed and what to do"
	exit2 = "2 bad usage: an unknown flag, a missing or invalid value (the message names it)"
	exit3 = "3 no committed checkpoint where --from points (or not the --step asked for)"
)

// wrapText wraps s at width columns.
func wrapText(s string, width int) string { return wrapIndent(s, width, "") }

// wrapIndent wraps s at width columns, starting each line after the first
// with indent.
func wrapIndent(s string, width int, indent string) string {
	words := strings.Fields(s)
	var b strings.Builder
	n := 0
	for i, w := range words {
		switch {
		case i == 0:
		case n+1+len(w) > width:
			b.WriteString("\n" + indent)
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
