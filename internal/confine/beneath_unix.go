//go:build unix && !linux

package confine

// beneath opens parts below the directory with flags, following no link,
// one component at a time.
func (d *Dir) beneath(parts []string, flags int) (int, error) { return d.walk(parts, flags) }
