package backup

import "errors"

var (
	// ErrNotEmpty is wrapped by Restore when the data directory holds
	// anything: Restore writes only into an empty or absent directory,
	// and changes nothing otherwise.
	ErrNotEmpty = errors.New("backup: data directory not empty")

	// ErrBroken is wrapped by Fetch when the stream of chunks is not
	// whole: a message missing or out of order, a length that does not
	// agree with the end's, or a stream that does not read back.
	ErrBroken = errors.New("backup: broken stream")

	// ErrInvalidConfig is wrapped by Restore and Fetch for settings they
	// cannot use.
	ErrInvalidConfig = errors.New("backup: invalid config")
)
