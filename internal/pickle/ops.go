package pickle

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"unicode/utf8"
)

// run executes opcodes until STOP.
func (d *decoder) run() (any, error) {
	for {
		d.at = d.pos
		b, err := d.read(1)
		if err != nil {
			return nil, err
		}
		op := b[0]
		if op == '.' { // STOP
			if len(d.marks) != 0 || len(d.stack) != 1 {
				return nil, fmt.Errorf("STOP with %d values and %d marks on the stack", len(d.stack), len(d.marks))
			}
			return d.stack[0], nil
		}
		if err := d.step(op); err != nil {
			return nil, err
		}
	}
}

func (d *decoder) step(op byte) error {
	switch op {
	case 0x80: // PROTO
		v, err := d.read(1)
		if err == nil && v[0] > 5 {
			err = fmt.Errorf("protocol %d is newer than 5", v[0])
		}
		return err
	case 0x95: // FRAME: a length hint; the frame's bytes follow inline
		_, err := d.read(8)
		return err
	case '(': // MARK
		if len(d.marks) >= d.lim.MaxMarks {
			return fmt.Errorf("%w: MARKs nested deeper than %d", ErrLimit, d.lim.MaxMarks)
		}
		d.marks = append(d.marks, len(d.stack))
		return nil
	case '0': // POP
		_, err := d.pop()
		return err
	case '1': // POP_MARK
		_, err := d.popMark()
		return err
	case '2': // DUP
		v, err := d.top()
		if err != nil {
			return err
		}
		return d.push(v)
	}
	if ok, err := d.scalar(op); ok {
		return err
	}
	if ok, err := d.container(op); ok {
		return err
	}
	if ok, err := d.memoOp(op); ok {
		return err
	}
	if ok, err := d.callOp(op); ok {
		return err
	}
	return fmt.Errorf("opcode %q (0x%02x) is not read: ferry reads pickles as data only", rune(op), op)
}

// scalar handles opcodes that push a number, string, bytes or constant.
func (d *decoder) scalar(op byte) (bool, error) {
	switch op {
	case 'N':
		return true, d.push(nil)
	case 0x88:
		return true, d.push(true)
	case 0x89:
		return true, d.push(false)
	case 'K', 'M', 'J': // BININT1, BININT2, BININT
		size := opSize(op)
		b, err := d.read(size)
		if err != nil {
			return true, err
		}
		var n int64
		switch size {
		case 1:
			n = int64(b[0])
		case 2:
			n = int64(binary.LittleEndian.Uint16(b))
		case 4:
			n = int64(int32(binary.LittleEndian.Uint32(b)))
		}
		return true, d.push(n)
	case 0x8a, 0x8b: // LONG1, LONG4
		return true, d.long(op)
	case 'G': // BINFLOAT
		b, err := d.read(8)
		if err != nil {
			return true, err
		}
		return true, d.push(float64frombits(b))
	case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
		return true, d.text(opSize(op))
	case 'B', 'C', 0x8e, 0x96, 'T', 'U': // (SHORT_)BINBYTES(8), BYTEARRAY8, (SHORT_)BINSTRING
		size := opSize(op)
		n, err := d.length(size)
		if err != nil {
			return true, err
		}
		b, _ := d.read(n)
		return true, d.push(Bytes(bytes.Clone(b)))
	}
	return false, nil
}

// long reads a two's-complement little-endian integer (LONG1, LONG4).
func (d *decoder) long(op byte) error {
	size := 1
	if op == 0x8b {
		size = 4
	}
	n, err := d.length(size)
	if err != nil {
		return err
	}
	b, _ := d.read(n)
	if n <= 8 {
		var u uint64
		for i := n - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		if n > 0 && n < 8 && b[n-1]&0x80 != 0 {
			u |= ^uint64(0) << (8 * n) // sign-extend
		}
		return d.push(int64(u))
	}
	be := make([]byte, n)
	for i := range b {
		be[n-1-i] = b[i]
	}
	v := new(big.Int).SetBytes(be)
	if b[n-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	return d.push(v)
}

func (d *decoder) text(size int) error {
	n, err := d.length(size)
	if err != nil {
		return err
	}
	b, _ := d.read(n)
	if !utf8.Valid(b) {
		return errors.New("string is not UTF-8")
	}
	return d.push(string(b))
}

// container handles opcodes that build tuples, lists, dicts and sets.
func (d *decoder) container(op byte) (bool, error) {
	switch op {
	case ')':
		return true, d.push(Tuple{})
	case ']':
		return true, d.push(&List{})
	case '}':
		return true, d.push(&Dict{})
	case 0x8f:
		return true, d.push(&Set{})
	case 0x85, 0x86, 0x87: // TUPLE1..3
		n := int(op-0x85) + 1
		t := make(Tuple, n)
		for i := n - 1; i >= 0; i-- {
			v, err := d.pop()
			if err != nil {
				return true, err
			}
			t[i] = v
		}
		return true, d.push(t)
	case 't', 'l', 'd', 0x91: // TUPLE, LIST, DICT, FROZENSET (from MARK)
		items, err := d.popMark()
		if err != nil {
			return true, err
		}
		return true, d.fromMark(op, items)
	case 'a', 'e', 's', 'u', 0x90: // APPEND, APPENDS, SETITEM, SETITEMS, ADDITEMS
		return true, d.extend(op)
	}
	return false, nil
}

func (d *decoder) fromMark(op byte, items []any) error {
	switch op {
	case 't':
		return d.push(Tuple(items))
	case 'l':
		return d.push(&List{Items: items})
	case 0x91:
		return d.push(&Set{Items: items})
	}
	dict := &Dict{}
	if err := addItems(dict, items); err != nil {
		return err
	}
	return d.push(dict)
}

func addItems(dict *Dict, kv []any) error {
	if len(kv)%2 != 0 {
		return errors.New("odd number of values for dict items")
	}
	for i := 0; i < len(kv); i += 2 {
		dict.Items = append(dict.Items, Item{Key: kv[i], Value: kv[i+1]})
	}
	return nil
}

// extend adds values to the list, dict or set below them.
func (d *decoder) extend(op byte) error {
	var items []any
	if op == 'a' || op == 's' {
		n := 1
		if op == 's' {
			n = 2
		}
		for range n {
			v, err := d.pop()
			if err != nil {
				return err
			}
			items = append([]any{v}, items...)
		}
	} else {
		var err error
		if items, err = d.popMark(); err != nil {
			return err
		}
	}
	target, err := d.top()
	if err != nil {
		return err
	}
	switch t := target.(type) {
	case *List:
		if op == 'a' || op == 'e' {
			t.Items = append(t.Items, items...)
			return nil
		}
	case *Dict:
		if op == 's' || op == 'u' {
			return addItems(t, items)
		}
	case *Set:
		if op == 0x90 {
			t.Items = append(t.Items, items...)
			return nil
		}
	case *Object:
		// A dict or list subclass (collections.OrderedDict, which
		// torch's state dicts are) is pickled as a call, then its items
		// (object.__reduce_ex__'s dictitems and listitems).
		switch op {
		case 's', 'u':
			return addItems(&t.Items, items)
		case 'a', 'e':
			t.Elems = append(t.Elems, items...)
			return nil
		}
	}
	return fmt.Errorf("opcode %q applied to a %T", rune(op), target)
}

// memoOp handles the memo: PUT and GET in their binary forms.
func (d *decoder) memoOp(op byte) (bool, error) {
	switch op {
	case 0x94: // MEMOIZE
		v, err := d.top()
		if err != nil {
			return true, err
		}
		return true, d.memoize(uint64(len(d.memo)), v)
	case 'q', 'r', 'h', 'j': // BINPUT, LONG_BINPUT, BINGET, LONG_BINGET
		size := 1
		if op == 'r' || op == 'j' {
			size = 4
		}
		b, err := d.read(size)
		if err != nil {
			return true, err
		}
		idx := uint64(b[0])
		if size == 4 {
			idx = uint64(binary.LittleEndian.Uint32(b))
		}
		if op == 'q' || op == 'r' {
			v, err := d.top()
			if err != nil {
				return true, err
			}
			return true, d.memoize(idx, v)
		}
		v, ok := d.memo[idx]
		if !ok {
			return true, fmt.Errorf("memo index %d was never stored", idx)
		}
		return true, d.push(v)
	}
	return false, nil
}

// callOp handles globals, calls and BUILD, recording them as data.
func (d *decoder) callOp(op byte) (bool, error) {
	switch op {
	case 'c': // GLOBAL "module\nname\n"
		mod, err := d.line()
		if err != nil {
			return true, err
		}
		name, err := d.line()
		if err != nil {
			return true, err
		}
		return true, d.push(Global{Module: mod, Name: name})
	case 0x93: // STACK_GLOBAL
		name, err1 := d.pop()
		mod, err2 := d.pop()
		if err := errors.Join(err1, err2); err != nil {
			return true, err
		}
		ms, ok1 := mod.(string)
		ns, ok2 := name.(string)
		if !ok1 || !ok2 {
			return true, errors.New("STACK_GLOBAL of values that are not strings")
		}
		return true, d.push(Global{Module: ms, Name: ns})
	case 'R', 0x81: // REDUCE, NEWOBJ
		return true, d.call(false)
	case 0x92: // NEWOBJ_EX
		return true, d.call(true)
	case 'Q': // BINPERSID: torch.save's reference to a tensor's storage
		id, err := d.pop()
		if err != nil {
			return true, err
		}
		return true, d.push(Persistent{ID: id})
	case 'b': // BUILD
		state, err := d.pop()
		if err != nil {
			return true, err
		}
		target, err := d.top()
		if err != nil {
			return true, err
		}
		o, ok := target.(*Object)
		if !ok {
			return true, fmt.Errorf("BUILD on a %T", target)
		}
		o.State = state
		return true, nil
	}
	return false, nil
}

func (d *decoder) call(withKwargs bool) error {
	var kwargs *Dict
	if withKwargs {
		kw, err := d.pop()
		if err != nil {
			return err
		}
		if kwargs, _ = kw.(*Dict); kwargs == nil {
			return fmt.Errorf("NEWOBJ_EX keyword arguments are a %T", kw)
		}
	}
	a, err := d.pop()
	if err != nil {
		return err
	}
	args, ok := a.(Tuple)
	if !ok {
		return fmt.Errorf("call arguments are a %T, not a tuple", a)
	}
	callable, err := d.pop()
	if err != nil {
		return err
	}
	return d.push(&Object{Callable: callable, Args: args, Kwargs: kwargs})
}

// line reads a newline-terminated ASCII name for GLOBAL, at most 256 bytes.
func (d *decoder) line() (string, error) {
	rest := d.in[d.pos:]
	if len(rest) > 257 {
		rest = rest[:257]
	}
	i := bytes.IndexByte(rest, '\n')
	if i < 0 {
		return "", errors.New("GLOBAL name without a newline within 256 bytes")
	}
	s := string(rest[:i])
	d.pos += i + 1
	return s, nil
}

// opSize is the size of the integer or length that follows op.
func opSize(op byte) int {
	switch op {
	case 'K', 'C', 'U', 0x8c:
		return 1
	case 'M':
		return 2
	case 0x8d, 0x8e, 0x96:
		return 8
	}
	return 4 // 'J', 'X', 'B', 'T'
}
