// Package dcprecordtest writes DCP .metadata records for tests: a pickle
// of the shape torch 2.6's FileSystemWriter writes (a Metadata whose
// storage_data maps MetadataIndex to _StorageInfo), so that trainers
// simulated in Go (the agent's save-schedule fuzzer) leave records the
// agent reads as it reads torch's. testdata/dcp-records holds real ones.
package dcprecordtest

import (
	"encoding/binary"
	"sort"
)

// Encode returns a protocol-4 pickle of a DCP Metadata naming each file
// of sizes (relative to the .metadata's folder) as one item from offset 0
// to its size.
func Encode(sizes map[string]int64) []byte {
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	b := []byte{0x80, 4}
	b = global(b, "torch.distributed.checkpoint.metadata", "Metadata")
	b = append(b, ')', 0x81, '}') // NEWOBJ (), the state dict
	b = str(b, "storage_data")
	b = append(b, '}', '(') // the storage dict, MARK
	for i, n := range names {
		b = global(b, "torch.distributed.checkpoint.metadata", "MetadataIndex")
		b = append(b, ')', 0x81, '}')
		b = str(b, "fqn")
		b = str(b, "item"+itoa(i))
		b = append(b, 's', 'b') // SETITEM, BUILD
		b = global(b, "torch.distributed.checkpoint.filesystem", "_StorageInfo")
		b = append(b, ')', 0x81, '}', '(')
		b = str(b, "relative_path")
		b = str(b, n)
		b = str(b, "offset")
		b = append(b, 'K', 0)
		b = str(b, "length")
		b = long(b, sizes[n])
		b = append(b, 'u', 'b') // SETITEMS, BUILD
	}
	b = append(b, 'u', 's', 'b', '.') // SETITEMS, SETITEM storage_data, BUILD, STOP
	return b
}

func global(b []byte, mod, name string) []byte {
	b = str(b, mod)
	b = str(b, name)
	return append(b, 0x93) // STACK_GLOBAL
}

func str(b []byte, s string) []byte {
	if len(s) < 256 {
		return append(append(b, 0x8c, byte(len(s))), s...)
	}
	b = append(b, 'X')
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// long writes n with LONG1, as Python does for any int past BININT's.
func long(b []byte, n int64) []byte {
	var le []byte
	for v := uint64(n); ; v >>= 8 {
		le = append(le, byte(v))
		if v < 0x80 {
			break
		}
	}
	return append(append(b, 0x8a, byte(len(le))), le...)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}
