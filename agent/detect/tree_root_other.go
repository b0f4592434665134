//go:build !unix

package detect

// openDirFlag: no O_DIRECTORY here.
const openDirFlag = 0
