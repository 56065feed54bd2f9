package keys

import "errors"

var (
	// ErrLength is returned by Decode when the input is not exactly Len bytes.
	ErrLength = errors.New("keys: event key must be 24 bytes")
	// ErrTag is returned by ParseTag for anything but 48 lowercase hex characters.
	ErrTag = errors.New("keys: invalid delivery tag")
)
