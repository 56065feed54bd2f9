//go:build !unix

package boltstore

// availBytes cannot tell the free space here; Open skips the check.
func availBytes(string) (uint64, bool) { return 0, false }
