package savetrace

import (
	"regexp"
	"strconv"
	"strings"
)

// Kind is an operation's name.
type Kind string

// The operations of FORMAT.md.
const (
	Mkdir       Kind = "mkdir"
	Write       Kind = "write"
	Create      Kind = "create"
	Append      Kind = "append"
	Close       Kind = "close"
	Text        Kind = "text"
	DCPMetadata Kind = "dcp-metadata"
	HFIndex     Kind = "hf-index"
	Rename      Kind = "rename"
	Remove      Kind = "remove"
	Rmtree      Kind = "rmtree"
	Symlink     Kind = "symlink"
	Barrier     Kind = "barrier"
	Complete    Kind = "complete"
	// RaiseIfExists is a framework's check that refuses to save over an
	// existing path: the job raises and dies there if the path exists.
	RaiseIfExists Kind = "raise-if-exists"
)

// opSpec is an operation's shape: its arguments (p a path, o an optional
// path, s a size, t a link target, c the rest of the line) and whether
// `all` runs it.
type opSpec struct {
	args string
	all  bool
}

var ops = map[Kind]opSpec{
	Mkdir: {args: "p"}, Write: {args: "ps"}, Create: {args: "p"}, Append: {args: "ps"},
	Close: {args: "p"}, Text: {args: "pc"}, DCPMetadata: {args: "po"}, HFIndex: {args: "po"},
	Rename: {args: "pp"}, Remove: {args: "p"}, Rmtree: {args: "p"}, Symlink: {args: "tp"},
	Barrier: {all: true}, Complete: {all: true}, RaiseIfExists: {args: "p"},
}

var opNames = "mkdir, write, create, append, close, text, dcp-metadata, hf-index, rename, remove, rmtree, symlink, barrier, complete, raise-if-exists"

var whoRE = regexp.MustCompile(`^(?:all|r(\*|[0-9]+))(?:/([a-z][a-z0-9_-]*))?$`)

// opLine parses one operation or cite line.
func (p *parser) opLine(line string) error {
	fields := strings.Fields(line)
	if fields[0] == "cite" || (fields[0] == "all" && len(fields) > 1 && fields[1] == "cite") {
		if fields[0] == "all" {
			fields = fields[1:]
		}
		if len(fields) < 3 {
			return p.errf("cite needs a repository-relative file and a function: cite <file> <function>")
		}
		p.cite = &Cite{File: fields[1], Function: strings.Join(fields[2:], " "), Line: p.line}
		return nil
	}
	m := whoRE.FindStringSubmatch(fields[0])
	if m == nil {
		return p.errf("%q is not who runs the operation (r0, r3, r*, all, r0/bg)", fields[0])
	}
	if len(fields) < 2 {
		return p.errf("%s: no operation", fields[0])
	}
	kind := Kind(fields[1])
	spec, ok := ops[kind]
	if !ok {
		return p.errf("unknown operation %q (known: %s, cite)", fields[1], opNames)
	}
	if p.cite == nil {
		return p.errf("%s: no cite line before this group of operations (cite <file> <function>)", kind)
	}
	op := Op{Line: p.line, Kind: kind, Cite: p.cite}
	switch {
	case fields[0] == "all" || strings.HasPrefix(fields[0], "all/"):
		if m[2] != "" {
			return p.errf("%s: `all` has no thread", fields[0])
		}
		op.Who.All = true
	case m[1] == "*":
		op.Who.Each = true
	default:
		r, _ := strconv.Atoi(m[1])
		if r >= p.t.Ranks {
			return p.errf("%s: rank %d, but ranks: %d", fields[0], r, p.t.Ranks)
		}
		op.Who.Rank = r
	}
	op.Who.Thread = m[2]
	if spec.all != op.Who.All {
		if spec.all {
			return p.errf("%s is run by all, not %s", kind, fields[0])
		}
		return p.errf("%s is run by a rank (r0, r*), not all", kind)
	}
	if err := p.args(&op, spec, line, fields[2:]); err != nil {
		return err
	}
	if err := p.track(op); err != nil {
		return err
	}
	p.t.Ops = append(p.t.Ops, op)
	return nil
}

// args checks an operation's arguments against its shape.
func (p *parser) args(op *Op, spec opSpec, line string, args []string) error {
	want := len(spec.args)
	rest := strings.HasSuffix(spec.args, "c")
	optional := strings.HasSuffix(spec.args, "o")
	if rest {
		want--
	}
	switch {
	case optional && (len(args) < want-1 || len(args) > want):
		return p.errf("%s takes %d or %d arguments (%s), got %d", op.Kind, want-1, want, usage(op.Kind), len(args))
	case optional:
		want = len(args)
	case len(args) != want && !(rest && len(args) > want):
		return p.errf("%s takes %d argument(s) (%s), got %d", op.Kind, want, usage(op.Kind), len(args))
	}
	for i, a := range args[:want] {
		var err error
		switch spec.args[i] {
		case 'p', 'o':
			err = p.checkPath(a, !op.Who.All)
		case 't':
			err = p.checkTarget(a, !op.Who.All)
		case 's':
			op.Size, err = p.size(a)
		}
		if err != nil {
			return err
		}
		if spec.args[i] != 's' {
			op.Args = append(op.Args, a)
		}
	}
	if rest {
		// The content as written: the line after its first three words.
		content := ""
		if len(args) > want {
			content = strings.TrimSpace(afterFields(line, 3))
		}
		if err := p.checkPlaceholders(content, !op.Who.All, false); err != nil {
			return err
		}
		op.Args = append(op.Args, content)
	}
	return nil
}

func usage(k Kind) string {
	return map[Kind]string{
		Mkdir: "<dir>", Write: "<path> <size>", Create: "<path>", Append: "<path> <size>", Close: "<path>",
		Text: "<path> <content...>", DCPMetadata: "<dir> [<file>]", HFIndex: "<dir> [<file>]", Rename: "<old> <new>",
		Remove: "<path>", Rmtree: "<dir>", Symlink: "<target> <link>", Barrier: "none", Complete: "none",
		RaiseIfExists: "<path>",
	}[k]
}

// afterFields returns s after its first n whitespace-separated words.
func afterFields(s string, n int) string {
	for range n {
		s = strings.TrimLeft(s, " \t")
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return ""
		}
		s = s[i:]
	}
	return s
}

var sizeRE = regexp.MustCompile(`^([0-9]+)(KiB|MiB|GiB)?$`)

func (p *parser) size(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, p.errf("size %q: want a byte count (4096, or 4KiB, 4MiB, 4GiB)", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > 1<<40 {
		return 0, p.errf("size %q: too large", s)
	}
	return n << map[string]int{"": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m[2]], nil
}

// track checks that append and close name a file their actor holds open.
func (p *parser) track(op Op) error {
	if op.Kind != Create && op.Kind != Append && op.Kind != Close {
		return nil
	}
	key := op.Who.String() + " " + op.Args[0]
	_, open := p.open[key]
	switch {
	case op.Kind == Create && open:
		return p.errf("create %s: %s already holds it open (line %d)", op.Args[0], op.Who, p.open[key])
	case op.Kind == Create:
		p.open[key] = p.line
	case !open:
		return p.errf("%s %s: %s does not hold it open (create it first)", op.Kind, op.Args[0], op.Who)
	case op.Kind == Close:
		delete(p.open, key)
	}
	return nil
}

// finish checks what only the whole trace shows.
func (p *parser) finish() error {
	if !p.inOps {
		if err := p.checkHeader(); err != nil {
			return err
		}
		return p.errf("no operations")
	}
	for key, line := range p.open {
		p.line = line
		return p.errf("%s is created and never closed", key)
	}
	for _, op := range p.t.Ops {
		if op.Kind == Complete {
			return nil
		}
	}
	return p.errf("no `all complete`: the replay needs the point at which the save is complete")
}
