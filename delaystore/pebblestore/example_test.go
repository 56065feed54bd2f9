package pebblestore_test

import (
	"fmt"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// An iterator reads the store as it was when it was made, while commits go
// on around it.
func ExampleStore_NewIter() {
	s, err := pebblestore.Open(pebblestore.Config{InMemory: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	commit := func(set, del string) {
		b := s.NewBatch()
		defer b.Close()
		_ = b.Set([]byte(set), []byte("1"))
		if del != "" {
			_ = b.Delete([]byte(del))
		}
		if err := b.Commit(delaystore.Sync); err != nil {
			fmt.Println(err)
		}
	}
	commit("a", "")
	commit("b", "")

	it, err := s.NewIter(delaystore.IterOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	commit("c", "a") // invisible to it

	for ok := it.First(); ok; ok = it.Next() {
		fmt.Printf("iterator: %s\n", it.Key())
	}
	if err := it.Close(); err != nil {
		fmt.Println(err)
	}
	_, err = s.Get([]byte("a"))
	fmt.Println("Get(a):", err)
	// Output:
	// iterator: a
	// iterator: b
	// Get(a): delaystore: not found
}
