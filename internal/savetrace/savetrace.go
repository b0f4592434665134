// Package savetrace reads save-order traces (testdata/saveorders/FORMAT.md):
// the sequence of file operations one framework performs to save one
// checkpoint step, read from its source and cited group by group. The
// agent's trace replay (agent/savetrace_test.go) plays them against the
// agent; the recordings' test compares them with what torch really did.
//
// Parsing is strict: every error names the file and line and what is
// wrong, so that a trace written by hand fails at once rather than
// replaying something else than what its author meant.
package savetrace

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Version is the format version this package reads (the `trace:` key).
const Version = 1

// Trace is one parsed trace.
type Trace struct {
	// Name is the file's base name without ".trace"; File the path read.
	Name, File string
	// Framework, Versions and Source are the header's words, as written.
	Framework, Versions, Source string
	// Layout is the ferry --layout the trace is replayed under.
	Layout string
	// Flags are the extra agent flags, split as a shell would.
	Flags []Flag
	// Ranks is the example's world size.
	Ranks int
	// Step is the step's folder under the watch dir, with {step}; "." for
	// a layout whose steps are files in the root.
	Step string
	// Keep is the rotation's limit (0: the trace does not rotate).
	Keep int
	// TorchSave are base-name patterns (path.Match) of files the
	// framework writes with torch.save (a zip archive) under names that
	// do not say so (Accelerate's optimizer.bin, random_states_0.pkl):
	// the replay writes them as zip archives, as it does .pt and .pth.
	TorchSave []string
	// DeepSpeedDP and DeepSpeedMP are the world sizes DeepSpeed records
	// in each model states file of the example (deepspeed-world header;
	// 0: none): the replay writes its model states as torch.save
	// archives holding them, so the agent reads the record as on a real
	// run.
	DeepSpeedDP, DeepSpeedMP int
	// Ops are the operations in the order written.
	Ops []Op
}

// Flag is one agent flag of a trace's `flags:` header.
type Flag struct {
	Name  string // without the leading dashes
	Value string // "" for a boolean flag given alone
}

// Cite is where a group of operations was read from.
type Cite struct {
	File, Function string
	Line           int
}

// Op is one operation.
type Op struct {
	Line int
	Who  Who
	Kind Kind
	// Args are the operation's arguments with placeholders unexpanded;
	// for text, Args[1] is the rest of the line as written (may be "").
	Args []string
	// Size is the byte count of write and append.
	Size int64
	Cite *Cite
}

// Who is the actor of an operation: every rank (r*), one rank, or all
// (barrier, complete); Thread names a rank's background writer (r0/bg).
type Who struct {
	All, Each bool
	Rank      int
	Thread    string
}

func (w Who) String() string {
	s := "all"
	switch {
	case w.Each:
		s = "r*"
	case !w.All:
		s = "r" + strconv.Itoa(w.Rank)
	}
	if w.Thread != "" {
		s += "/" + w.Thread
	}
	return s
}

// Actor is the name of rank's actor (rank with the thread, if any).
func (w Who) Actor(rank int) string {
	if w.Thread == "" {
		return "r" + strconv.Itoa(rank)
	}
	return "r" + strconv.Itoa(rank) + "/" + w.Thread
}

// ParseFile reads and parses one trace file.
func ParseFile(path string) (*Trace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return Parse(path, data)
}

// Glob parses every *.trace file in dir, sorted by name; a missing
// folder is no trace. It stops at the first invalid one.
func Glob(dir string) ([]*Trace, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.trace"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*Trace
	for _, f := range files {
		t, err := ParseFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Parse parses a trace's bytes; name is the file named in errors.
func Parse(name string, data []byte) (*Trace, error) {
	p := &parser{file: name, header: map[string]string{}, open: map[string]int{}}
	p.t = &Trace{File: name, Name: strings.TrimSuffix(filepath.Base(name), ".trace")}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.line++
		if err := p.parseLine(sc.Text()); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, p.line, err)
	}
	if err := p.finish(); err != nil {
		return nil, err
	}
	return p.t, nil
}

type parser struct {
	file   string
	line   int
	t      *Trace
	header map[string]string
	// keyLine is where each key was given, for its errors.
	keyLine map[string]int
	cite    *Cite
	inOps   bool
	// open holds the files an actor created and has not closed:
	// "who path" -> the line of its create.
	open map[string]int
}

func (p *parser) errf(format string, args ...any) error {
	return fmt.Errorf("%s:%d: "+format, append([]any{p.file, p.line}, args...)...)
}

// stripComment cuts a comment: `#` at the start or after a blank.
func stripComment(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
			return s[:i]
		}
	}
	return s
}

func (p *parser) parseLine(raw string) error {
	line := strings.TrimSpace(stripComment(raw))
	if line == "" {
		return nil
	}
	first, _, _ := strings.Cut(line, " ")
	if !p.inOps && strings.HasSuffix(first, ":") {
		return p.headerLine(line)
	}
	if strings.HasSuffix(first, ":") {
		return p.errf("header key %q after the first operation: the header comes first", strings.TrimSuffix(first, ":"))
	}
	if !p.inOps {
		if err := p.checkHeader(); err != nil {
			return err
		}
		p.inOps = true
	}
	return p.opLine(line)
}

// WrittenByTorchSave reports whether the trace names rel's base name among
// the files its framework writes with torch.save (its torch-save header).
func (t *Trace) WrittenByTorchSave(rel string) bool {
	base := filepath.Base(rel)
	for _, g := range t.TorchSave {
		if ok, _ := filepath.Match(g, base); ok {
			return true
		}
	}
	return false
}
