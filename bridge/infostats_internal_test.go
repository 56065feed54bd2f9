package bridge

import (
	"reflect"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
)

// INFO's stats are wire.Stats, converted from the dispatcher's: each
// counter keeps the JSON name it has always had on the wire, so a client
// of an older or newer build reads the same fields.
func TestInfoStats_SameJSONAsDispatch(t *testing.T) {
	d, w := reflect.TypeFor[dispatch.Stats](), reflect.TypeFor[wire.Stats]()
	if d.NumField() != w.NumField() {
		t.Fatalf("dispatch.Stats has %d fields, wire.Stats %d", d.NumField(), w.NumField())
	}
	for i := range d.NumField() {
		df, wf := d.Field(i), w.Field(i)
		if df.Name != wf.Name || df.Tag.Get("json") != wf.Tag.Get("json") {
			t.Errorf("field %d: dispatch.Stats %s `json:%q`, wire.Stats %s `json:%q`",
				i, df.Name, df.Tag.Get("json"), wf.Name, wf.Tag.Get("json"))
		}
	}
}
