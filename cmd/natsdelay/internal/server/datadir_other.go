//go:build !unix

package server

import (
	"fmt"
	"os"
)

// lockDataDir creates dir if it is missing. There is no lock here; the
// engines' own locks still stop a second serve, but only once it has
// started its NATS server.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the data dir %s: %w", dir, err)
	}
	return func() {}, nil
}
