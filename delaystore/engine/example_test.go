package engine_test

import (
	"fmt"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// Open picks the engine by name; the rest of the program sees only a
// delaystore.Store.
func ExampleOpen() {
	s, err := engine.Open(engine.Config{Engine: engine.Memory})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	b := s.NewBatch()
	defer b.Close()
	for _, k := range []string{"orders.b", "orders.a", "users.a"} {
		_ = b.Set([]byte(k), []byte("v:"+k))
	}
	if err := b.Commit(delaystore.Sync); err != nil {
		fmt.Println(err)
		return
	}

	// Keys come back in byte order, within [lower, upper).
	opts := delaystore.IterOptions{LowerBound: []byte("orders."), UpperBound: []byte("orders/")}
	err = s.Scan(opts, func(k, v []byte) bool {
		fmt.Printf("%s = %s\n", k, v)
		return true
	})
	if err != nil {
		fmt.Println(err)
	}

	_, err = engine.Open(engine.Config{Engine: "rocksdb", Dir: "data"})
	fmt.Println(err)
	// Output:
	// orders.a = v:orders.a
	// orders.b = v:orders.b
	// engine: delaystore: invalid config: Engine ("rocksdb") must be one of pebble, bolt, memory
}
