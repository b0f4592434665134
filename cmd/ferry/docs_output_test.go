package main

import (
	"regexp"
	"strings"
	"testing"
)

// docsWithRealOutput are the documents whose ```text blocks claim to be
// what their ```sh blocks printed.
var docsWithRealOutput = map[string]bool{"docs/getting-started.md": true}

// logLine is a log line as ferry writes it: time, level, message, fields.
var logLine = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT[0-9:.]+Z\t(INFO|WARN|ERROR)\t([^\t{]+?)\s*(?:\t|$)`)

// logMessages returns the "LEVEL message" of every log line in text.
func logMessages(text string) map[string]bool {
	msgs := map[string]bool{}
	for _, m := range logLine.FindAllStringSubmatch(text, -1) {
		msgs[m[1]+" "+m[2]] = true
	}
	return msgs
}

// checkShownOutput fails when a run of the document's recipe logged an
// INFO line its ```text blocks do not show: a new or reworded message
// leaves a page that says "every output what it printed" showing
// something else. (Lines the run's conditions add, a warning for a busy
// port, are only logged; the reverse is not checked, as which lines a
// run prints depends on timing, e.g. whether the agent starts before the
// trainer creates its folder.)
func checkShownOutput(t *testing.T, doc string, blocks []docBlock, out string) {
	t.Helper()
	var shown strings.Builder
	for _, b := range blocks {
		if f := strings.Fields(b.info); len(f) > 0 && f[0] == "text" {
			shown.WriteString(b.body)
		}
	}
	want := logMessages(shown.String())
	for msg := range logMessages(out) {
		switch {
		case want[msg]:
		case strings.HasPrefix(msg, "INFO "):
			t.Errorf("%s: the recipe logged %q, which no ```text block of the page shows: show the real output", doc, msg)
		default:
			t.Logf("%s: the recipe logged %q (not shown on the page)", doc, msg)
		}
	}
}
