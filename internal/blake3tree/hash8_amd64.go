//go:build amd64 && !purego

package blake3tree

import "golang.org/x/sys/cpu"

//go:generate go run gen_hash8.go

// hash8 compresses blocks consecutive 64-byte blocks of eight inputs at
// once, input i starting at msg + i*stride, from the key IV, and writes
// each input's chaining value to out[i]. ctr holds each input's counter,
// low words then high words; a block's flags are flags[0], with flags[1]
// on the first block and flags[2] on the last. scratch is working memory.
//
//go:noescape
func hash8(out *[8][8]uint32, msg *byte, stride uintptr, blocks uintptr, ctr *[16]uint32, flags *[3]uint32, scratch *[32][8]uint32)

var haveHash8 = cpu.X86.HasAVX2
