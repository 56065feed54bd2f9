//go:build unix

package boltstore

import "golang.org/x/sys/unix"

// availBytes returns the bytes free to an unprivileged writer on the file
// system that holds dir, and whether the system could tell.
func availBytes(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
