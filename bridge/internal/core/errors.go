package core

import (
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// unavailable returns an error wrapping wire.ErrUnavailable: a 503.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", wire.ErrUnavailable, fmt.Sprintf(format, args...))
}
