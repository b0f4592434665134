package main

// checkKeepRemote checks --keep-remote and --keep-remote-every: the
// agent's remote retention takes prune's policy, keep-last and keep-every,
// and keep-every alone would be a policy that deletes nothing it names.
func checkKeepRemote(keepLast int, keepEvery int64) error {
	switch {
	case keepLast < 0:
		return usagef("--keep-remote %d: must be 0 (keep everything) or more", keepLast)
	case keepEvery < 0:
		return usagef("--keep-remote-every %d: must be 0 (none) or more", keepEvery)
	case keepEvery > 0 && keepLast == 0:
		return usagef("--keep-remote-every %d needs --keep-remote N: it says which older steps to keep besides the N newest", keepEvery)
	}
	return nil
}
