package keys_test

import (
	"bytes"
	"testing"

	"github.com/natsdelay/natsdelay/keys"
)

// FuzzDecode checks that Decode never panics and that whatever it accepts
// round-trips through the tag form.
func FuzzDecode(f *testing.F) {
	f.Add(keys.New(1, 2, 3).Bytes())
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 24))
	f.Add(bytes.Repeat([]byte{0x00}, 25))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := keys.Decode(b)
		if (err == nil) != (len(b) == keys.Len) {
			t.Fatalf("Decode(%d bytes) error = %v", len(b), err)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(k[:], b) {
			t.Fatalf("Decode changed the bytes")
		}
		p, err := keys.ParseTag(k.Tag())
		if err != nil || p != k {
			t.Fatalf("tag round trip: %v, %v", p, err)
		}
	})
}

// FuzzParseTag checks that ParseTag never panics and accepts exactly the
// canonical lowercase hex form.
func FuzzParseTag(f *testing.F) {
	f.Add(keys.New(1, 2, 3).Tag())
	f.Add("")
	f.Add("ABCDEF000000000000000000000000000000000000000000")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := keys.ParseTag(s)
		if err != nil {
			return
		}
		if k.Tag() != s {
			t.Fatalf("ParseTag accepted %q, which is not canonical (canonical %q)", s, k.Tag())
		}
	})
}
