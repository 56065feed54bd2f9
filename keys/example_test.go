package keys_test

import (
	"fmt"

	"github.com/natsdelay/natsdelay/keys"
)

func ExampleNew() {
	k := keys.New(0x0102030405060708, 1_800_000_000_000, 7)
	fmt.Println(k.Tag())
	fmt.Println(k.TopicHash() == 0x0102030405060708, k.Bucket(), k.EventID())
	// Output:
	// 0102030405060708000001a3185c50000000000000000007
	// true 1800000000000 7
}
