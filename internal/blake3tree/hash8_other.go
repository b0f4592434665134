//go:build !amd64 || purego

package blake3tree

var haveHash8 = false

func hash8(out *[8][8]uint32, msg *byte, stride uintptr, blocks uintptr, ctr *[16]uint32, flags *[3]uint32, scratch *[32][8]uint32) {
	panic("blake3tree: hash8 without AVX2")
}
