package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// Help text shows one default per flag. urfave/cli appends "(default: X)"
// to every flag's usage; ferry's usage strings already say the default
// where it is not a plain value ("default: the latest committed",
// "(required)"), bool flags default to off, and -1 marks "not given".
func init() {
	stock := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string { return oneDefault(f, stock(f)) }
}

// oneDefault drops the default urfave/cli appended to s, the help line of
// f, where it says nothing or repeats what the usage says.
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
	def := df.GetDefaultText()
	if df.TakesValue() && def != "-1" && !strings.Contains(usage, "(default") && !strings.Contains(usage, "(required") &&
		!strings.Contains(usage, "("+def+":") {
		return s
	}
	i := strings.LastIndex(s, mark)
	end := strings.Index(s[i+1:], ")")
	if end < 0 {
		return s
	}
	return s[:i] + s[i+1+end+1:]
}
