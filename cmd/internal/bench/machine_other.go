//go:build !linux

package bench

import "errors"

var errNoTmpfs = errors.New("a tmpfs per node needs Linux")

func mountTmpfs(string) error { return errNoTmpfs }

func unmount(string) error { return errNoTmpfs }
