// Package pickle reads Python pickles as data, never as code: a bounded
// decoder for the subset of the pickle protocols (2 to 5) that Python's
// pickler writes for plain objects, dataclasses, dicts, lists, tuples,
// sets, numbers, strings and bytes. PyTorch DCP's ".metadata" is such a
// pickle, and so is the data.pkl of a torch.save archive (DeepSpeed's
// model states); ferry reads them to learn what a checkpoint step holds.
//
// Nothing is ever imported or called. A global ("module.name") is a
// [Global] value; a call of one (REDUCE, NEWOBJ, NEWOBJ_EX) is an
// [Object] recording the callable and its arguments; BUILD records the
// state on the object. Callers interpret the tree they get.
//
// The input is untrusted: every length is checked against the bytes that
// remain before anything is allocated, the number of values created is
// capped (Limits.MaxValues), and so are the memo and the nesting of marks.
// A persistent id (BINPERSID, torch.save's reference to a tensor's
// storage) is a [Persistent] value. Opcodes that need outside help (the
// extension registry, out-of-band buffers) and the text opcodes of
// protocol 0 are refused with an error naming them.
//
// Why not a library: github.com/nlpodyssey/gopickle (the one maintained
// Go reader) allocates buffers of the lengths the input declares before
// reading them, so a pickle of a few bytes can demand gigabytes; a reader
// that faces files any process of the node may write cannot do that.
package pickle

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
)

// Global is a reference to a module-level Python name, as GLOBAL and
// STACK_GLOBAL write it.
type Global struct {
	Module, Name string
}

// String gives the dotted name.
func (g Global) String() string { return g.Module + "." + g.Name }

// Object is the result of calling a callable in the pickle (REDUCE,
// NEWOBJ, NEWOBJ_EX), with the state BUILD gave it.
type Object struct {
	// Callable is what was called: usually a Global (the class).
	Callable any
	// Args are the positional arguments (a Tuple; nil for NEWOBJ with
	// none). Kwargs holds NEWOBJ_EX's keyword arguments, if any.
	Args   Tuple
	Kwargs *Dict
	// State is what BUILD passed, nil if none: usually a *Dict of
	// attributes, or a Tuple (dict, slots dict).
	State any
	// Items and Elems are what SETITEM(S) and APPEND(S) added to the
	// object: the entries of a dict subclass (collections.OrderedDict)
	// and the elements of a list subclass.
	Items Dict
	Elems []any
}

// Persistent is a reference BINPERSID makes to something stored outside
// the pickle, with the id the pickler gave it: torch.save refers so to
// each tensor's storage (a tuple ("storage", type, key, location,
// numel)), stored as its own member of the zip archive. It is kept as a
// value: nothing is loaded.
type Persistent struct {
	ID any
}

// Class names the callable when it is a Global, else "".
func (o *Object) Class() string {
	if g, ok := o.Callable.(Global); ok {
		return g.String()
	}
	return ""
}

// Attr returns the attribute name from the object's state: the state
// dict, or either dict of a (dict, slots) pair. ok is false if absent.
func (o *Object) Attr(name string) (any, bool) {
	switch s := o.State.(type) {
	case *Dict:
		return s.Get(name)
	case Tuple:
		for _, part := range s {
			if d, ok := part.(*Dict); ok {
				if v, ok := d.Get(name); ok {
					return v, true
				}
			}
		}
	}
	return nil, false
}

// Tuple is a Python tuple.
type Tuple []any

// List is a Python list (a pointer: APPEND changes it in place, and the
// memo shares it).
type List struct{ Items []any }

// Set is a Python set or frozenset.
type Set struct{ Items []any }

// Dict is a Python dict as its items in insertion order; keys may be any
// value (objects included), so lookup is by string key only.
type Dict struct{ Items []Item }

// Item is one key and value of a Dict.
type Item struct{ Key, Value any }

// Get returns the value of the string key k.
func (d *Dict) Get(k string) (any, bool) {
	for i := len(d.Items) - 1; i >= 0; i-- {
		if s, ok := d.Items[i].Key.(string); ok && s == k {
			return d.Items[i].Value, true
		}
	}
	return nil, false
}

// Bytes is a Python bytes or bytearray value.
type Bytes []byte

// Int returns v as an int64 when it is an integer (int64, a bool, or a
// *big.Int that fits).
func Int(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case *big.Int:
		if n.IsInt64() {
			return n.Int64(), true
		}
	}
	return 0, false
}

// Limits bound what a decode may create.
type Limits struct {
	// MaxValues caps the values created (each opcode creates at most one).
	MaxValues int
	// MaxMemo caps the memo's entries and the largest memo index.
	MaxMemo int
	// MaxMarks caps the nesting of MARKs.
	MaxMarks int
}

// DefaultLimits suit DCP metadata of very large models (a million saved
// chunks) while keeping a hostile input to a few hundred MB of memory.
var DefaultLimits = Limits{MaxValues: 8 << 20, MaxMemo: 8 << 20, MaxMarks: 1 << 10}

// ErrLimit is wrapped by errors from a pickle that exceeds Limits.
var ErrLimit = errors.New("pickle exceeds the reader's limits")

// Decode reads one pickle from data and returns its value; bytes after
// the STOP opcode are refused.
func Decode(data []byte, lim Limits) (any, error) {
	d := &decoder{in: data, lim: lim, memo: map[uint64]any{}}
	v, err := d.run()
	if err != nil {
		return nil, fmt.Errorf("pickle at byte %d: %w", d.at, err)
	}
	if d.pos != len(d.in) {
		return nil, fmt.Errorf("pickle: %d bytes after STOP", len(d.in)-d.pos)
	}
	return v, nil
}

type decoder struct {
	in      []byte
	pos, at int
	lim     Limits
	stack   []any
	marks   []int
	memo    map[uint64]any
	values  int
}

func (d *decoder) read(n int) ([]byte, error) {
	if n < 0 || n > len(d.in)-d.pos {
		return nil, fmt.Errorf("%w: needs %d bytes, %d remain", errTruncated, n, len(d.in)-d.pos)
	}
	b := d.in[d.pos : d.pos+n]
	d.pos += n
	return b, nil
}

var errTruncated = errors.New("truncated")

// length reads a little-endian length of size bytes and checks it against
// what remains before anyone allocates it.
func (d *decoder) length(size int) (int, error) {
	b, err := d.read(size)
	if err != nil {
		return 0, err
	}
	var n uint64
	switch size {
	case 1:
		n = uint64(b[0])
	case 4:
		n = uint64(binary.LittleEndian.Uint32(b))
	case 8:
		n = binary.LittleEndian.Uint64(b)
	}
	if n > uint64(len(d.in)-d.pos) {
		return 0, fmt.Errorf("%w: declares %d bytes, %d remain", errTruncated, n, len(d.in)-d.pos)
	}
	return int(n), nil
}

func (d *decoder) push(v any) error {
	d.values++
	if d.values > d.lim.MaxValues {
		return fmt.Errorf("%w: more than %d values", ErrLimit, d.lim.MaxValues)
	}
	d.stack = append(d.stack, v)
	return nil
}

func (d *decoder) pop() (any, error) {
	floor := 0
	if len(d.marks) > 0 {
		floor = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= floor {
		return nil, errors.New("stack underflow")
	}
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

func (d *decoder) top() (any, error) {
	floor := 0
	if len(d.marks) > 0 {
		floor = d.marks[len(d.marks)-1]
	}
	if len(d.stack) <= floor {
		return nil, errors.New("stack underflow")
	}
	return d.stack[len(d.stack)-1], nil
}

// popMark returns the values pushed since the last MARK and drops it.
func (d *decoder) popMark() ([]any, error) {
	if len(d.marks) == 0 {
		return nil, errors.New("no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := append([]any(nil), d.stack[m:]...)
	d.stack = d.stack[:m]
	return items, nil
}

func (d *decoder) memoize(idx uint64, v any) error {
	if idx >= uint64(d.lim.MaxMemo) || len(d.memo) >= d.lim.MaxMemo {
		return fmt.Errorf("%w: memo index %d (at most %d entries)", ErrLimit, idx, d.lim.MaxMemo)
	}
	d.memo[idx] = v
	return nil
}

func float64frombits(b []byte) float64 {
	return math.Float64frombits(binary.BigEndian.Uint64(b))
}
