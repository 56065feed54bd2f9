package core

import (
	"reflect"
	"testing"

	"github.com/natsdelay/natsdelay/dispatch"
)

// TestAddStats_EveryCounterCarried checks that the counters of a replaced
// generation's dispatcher are added into the Service's, every one of them:
// each counter field of dispatch.Stats, found by reflection so that a new
// one is not forgotten, is summed; the gauges are the live dispatcher's.
func TestAddStats_EveryCounterCarried(t *testing.T) {
	gauges := map[string]bool{"InFlight": true, "Topics": true, "Limited": true, "Paused": true}
	var a, b dispatch.Stats
	vb := reflect.ValueOf(&b).Elem()
	for i := range vb.NumField() {
		vb.Field(i).SetUint(uint64(i + 1))
	}
	addStats(&a, b)
	va := reflect.ValueOf(a)
	for i := range va.NumField() {
		name := va.Type().Field(i).Name
		want := uint64(i + 1)
		if gauges[name] {
			want = 0
		}
		if got := va.Field(i).Uint(); got != want {
			t.Errorf("%s after addStats = %d, want %d", name, got, want)
		}
	}
}
