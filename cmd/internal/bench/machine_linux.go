package bench

import "syscall"

// tmpfsOptions bound a node's tmpfs, so that a run gone wrong cannot take
// the memory of a machine others share.
const tmpfsOptions = "mode=0700,size=2g"

// mountTmpfs mounts a tmpfs on dir, as mount -t tmpfs does.
func mountTmpfs(dir string) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, tmpfsOptions)
}

func unmount(dir string) error { return syscall.Unmount(dir, 0) }
