package keys_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/natsdelay/natsdelay/keys"
)

// TestKey_Order_MatchesFields checks the property every due scan relies on:
// comparing encoded keys byte by byte orders them exactly as comparing
// (topicHash, bucket, eventID) numerically.
func TestKey_Order_MatchesFields(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	edge := []uint64{0, 1, 0xff, 0x100, math.MaxUint32, math.MaxUint64 - 1, math.MaxUint64}
	pick := func() uint64 {
		if r.IntN(3) == 0 {
			return edge[r.IntN(len(edge))]
		}
		return r.Uint64()
	}
	for i := 0; i < 20000; i++ {
		a := [3]uint64{pick(), pick(), pick()}
		b := [3]uint64{pick(), pick(), pick()}
		if r.IntN(2) == 0 {
			b[0] = a[0]
			if r.IntN(2) == 0 {
				b[1] = a[1]
			}
		}
		ka, kb := keys.New(a[0], a[1], a[2]), keys.New(b[0], b[1], b[2])
		if got, want := bytes.Compare(ka[:], kb[:]), cmpFields(a, b); got != want {
			t.Fatalf("bytes.Compare(%v, %v) = %d, field order says %d", a, b, got, want)
		}
	}
}

func cmpFields(a, b [3]uint64) int {
	for i := range a {
		switch {
		case a[i] < b[i]:
			return -1
		case a[i] > b[i]:
			return 1
		}
	}
	return 0
}

func TestKey_RoundTrip(t *testing.T) {
	k := keys.Make("orders.reminder", 1_800_000_000_123, 0, 42)
	if k.TopicHash() != keys.TopicHash("orders.reminder") || k.Bucket() != 1_800_000_000_123 || k.EventID() != 42 {
		t.Fatalf("fields of %v: %x %d %d", k, k.TopicHash(), k.Bucket(), k.EventID())
	}
	d, err := keys.Decode(k.Bytes())
	if err != nil || d != k {
		t.Fatalf("Decode(Bytes()) = %v, %v; want %v", d, err, k)
	}
	p, err := keys.ParseTag(k.Tag())
	if err != nil || p != k {
		t.Fatalf("ParseTag(Tag()) = %v, %v; want %v", p, err, k)
	}
	if len(k.Tag()) != keys.TagLen || strings.ToLower(k.Tag()) != k.Tag() {
		t.Fatalf("tag %q is not 48 lowercase hex characters", k.Tag())
	}
	if got := string(k.AppendTag([]byte("x."))); got != "x."+k.Tag() {
		t.Fatalf("AppendTag = %q, want %q", got, "x."+k.Tag())
	}
}

func TestBucket(t *testing.T) {
	tests := []struct {
		name          string
		fireAt, width int64
		want          uint64
	}{
		{"raw milliseconds", 1500, 0, 1500},
		{"one second buckets", 1999, 1000, 1},
		{"bucket start", 2000, 1000, 2},
		{"before epoch clamps", -5, 1000, 0},
		{"negative width is raw", 77, -1, 77},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keys.Bucket(tt.fireAt, tt.width); got != tt.want {
				t.Fatalf("Bucket(%d, %d) = %d, want %d", tt.fireAt, tt.width, got, tt.want)
			}
			if start := keys.BucketStartMs(keys.Bucket(tt.fireAt, tt.width), tt.width); tt.fireAt >= 0 && start > tt.fireAt {
				t.Fatalf("BucketStartMs = %d is after fire time %d: waking then would be early", start, tt.fireAt)
			}
		})
	}
	if got := keys.BucketStartMs(math.MaxUint64, 1000); got != math.MaxInt64 {
		t.Fatalf("BucketStartMs overflow = %d, want MaxInt64", got)
	}
}

func TestDecode_WrongLength(t *testing.T) {
	for _, n := range []int{0, 1, 23, 25, 48} {
		if _, err := keys.Decode(make([]byte, n)); !errors.Is(err, keys.ErrLength) {
			t.Errorf("Decode(%d bytes) error = %v, want ErrLength", n, err)
		}
	}
}

func TestParseTag_Rejects(t *testing.T) {
	good := keys.New(0xabcdef, 2, 3).Tag()
	tests := map[string]string{
		"empty":        "",
		"short":        good[:47],
		"long":         good + "0",
		"uppercase":    strings.ToUpper(good),
		"not hex":      "g" + good[1:],
		"space":        " " + good[1:],
		"multibyte":    "é" + good[2:],
		"binary key":   string(keys.New(1, 2, 3).Bytes()) + string(keys.New(1, 2, 3).Bytes()),
		"0x prefix":    "0x" + good[2:],
		"dash":         good[:20] + "-" + good[21:],
		"null byte":    "\x00" + good[1:],
		"wildcard tag": ">" + good[1:],
	}
	for name, tag := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := keys.ParseTag(tag)
			if !errors.Is(err, keys.ErrTag) {
				t.Fatalf("ParseTag(%q) error = %v, want ErrTag", tag, err)
			}
		})
	}
}

// TestBounds checks the scan bounds, including the last topic where
// topicHash+1 overflows.
func TestBounds(t *testing.T) {
	for _, h := range []uint64{0, 1, 0x00ff_ffff_ffff_ffff, math.MaxUint64 - 1, math.MaxUint64} {
		lo, hi := keys.TopicLowerBound(h), keys.TopicUpperBound(h)
		first, last := keys.New(h, 0, 0), keys.New(h, math.MaxUint64, math.MaxUint64)
		if bytes.Compare(first[:], lo) < 0 {
			t.Errorf("topic %x: first key below lower bound", h)
		}
		if hi != nil && bytes.Compare(last[:], hi) >= 0 {
			t.Errorf("topic %x: last key not below upper bound %x", h, hi)
		}
		if h == math.MaxUint64 && hi != nil {
			t.Errorf("last topic: upper bound %x, want nil (unbounded)", hi)
		}
		if h < math.MaxUint64 {
			next := keys.New(h+1, 0, 0)
			if bytes.Compare(next[:], hi) < 0 {
				t.Errorf("topic %x: next topic's first key is below the upper bound", h)
			}
		}
		prev := keys.New(h-1, math.MaxUint64, math.MaxUint64)
		if h > 0 && bytes.Compare(prev[:], lo) >= 0 {
			t.Errorf("topic %x: previous topic's last key is not below the lower bound", h)
		}
	}
}

// TestDueUpperBound checks that the due bound includes every key up to and
// including the current bucket and excludes the next bucket.
func TestDueUpperBound(t *testing.T) {
	const h = 77
	for _, width := range []int64{0, 1000} {
		now := int64(1_800_000_000_500)
		hi := keys.DueUpperBound(h, now, width)
		cur := keys.New(h, keys.Bucket(now, width), math.MaxUint64)
		next := keys.New(h, keys.Bucket(now, width)+1, 0)
		if bytes.Compare(cur[:], hi) >= 0 {
			t.Errorf("width %d: current bucket's last key is not below the due bound", width)
		}
		if bytes.Compare(next[:], hi) < 0 {
			t.Errorf("width %d: next bucket's first key is below the due bound", width)
		}
	}
	hi := keys.DueUpperBound(h, math.MaxInt64, 0)
	if end := keys.New(h, math.MaxInt64, math.MaxUint64); bytes.Compare(end[:], hi) >= 0 || bytes.Compare(hi, keys.TopicUpperBound(h)) >= 0 {
		t.Errorf("due bound at the end of time = %x, want within the topic and above its last bucket", hi)
	}
}

// TestFireAtMs checks that the key time rounds up, so a key never sorts a
// message before its real fire time (never early).
func TestFireAtMs(t *testing.T) {
	for _, c := range []struct {
		name string
		ns   int64
		want int64
	}{
		{"zero", 0, 0},
		{"whole", 5_000_000, 5},
		{"just over", 5_000_001, 6},
		{"just under", 4_999_999, 5},
		{"negative", -1_500_000, -1},
		{"max", math.MaxInt64, math.MaxInt64/1_000_000 + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := keys.FireAtMs(c.ns); got != c.want {
				t.Errorf("FireAtMs(%d) = %d, want %d", c.ns, got, c.want)
			}
		})
	}
}

// TestKey_Successor checks that the successor sorts after k and before
// every key greater than k.
func TestKey_Successor(t *testing.T) {
	k := keys.New(1, 2, 3)
	next := keys.New(1, 2, 4)
	s := k.Successor()
	if bytes.Compare(k[:], s) >= 0 || bytes.Compare(s, next[:]) >= 0 {
		t.Errorf("Successor(%s) = %x, want between it and %s", k, s, next)
	}
}

// TestClip checks that Clip bounds hostile input and keeps it valid UTF-8.
func TestClip(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"short", "abc", "abc"},
		{"exactly 64", strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{"long", strings.Repeat("a", 70), strings.Repeat("a", 64) + "..."},
		{"rune across the cut", strings.Repeat("a", 63) + "é" + "bbb", strings.Repeat("a", 63) + "..."},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := keys.Clip(c.in)
			if got != c.want || !utf8.ValidString(got) {
				t.Errorf("Clip(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
