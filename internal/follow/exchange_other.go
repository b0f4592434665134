//go:build !linux

package follow

import "errors"

// exchange is not available here: swap moves the old folder aside first.
func exchange(a, b string) error { return errors.ErrUnsupported }
