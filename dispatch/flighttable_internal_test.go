package dispatch

import (
	"log/slog"
	"testing"

	"github.com/natsdelay/natsdelay/keys"
)

// A key's settled mark holds from its answer until its delete commits,
// whether the mark rides on its flight or sits in the map: a flight
// dropped before the commit (a move, a rewrite, a read that found it
// gone) leaves the mark on its key, and only the commit, or uncancel,
// takes it away. Without it a scan that read the message before the
// answer would deliver it again after the +OK.
func TestFlightTable_CanceledMark_OutlivesItsFlight(t *testing.T) {
	ft := newFlightTable(Config{MaxInFlight: 10}, slog.New(slog.DiscardHandler))
	flightOf := func(k keys.Key) *flight {
		f := &flight{key: k, idx: -1, topic: &topic{}}
		ft.add(f)
		return f
	}
	answered, dropped, restored := keys.New(1, 1, 1), keys.New(1, 1, 2), keys.New(1, 1, 3)
	for _, k := range []keys.Key{answered, dropped, restored} {
		ft.markSettling(k) // no flight yet: the mark goes in the map
		ft.uncancel(k)
		flightOf(k)
		ft.markSettling(k)
		if !ft.isCanceled(k) || !ft.settled(k) || !ft.busy(k) {
			t.Fatalf("%s marked on its flight: canceled %v, settled %v, busy %v; want all", k, ft.isCanceled(k), ft.settled(k), ft.busy(k))
		}
	}
	if len(ft.canceled) != 0 {
		t.Fatalf("%d keys in the map for marks on flights, want none", len(ft.canceled))
	}

	ft.drop(ft.byKey[dropped])
	if !ft.isCanceled(dropped) || !ft.busy(dropped) {
		t.Fatal("a flight dropped before its delete committed took its key's mark with it")
	}
	ft.uncancel(restored)
	if ft.isCanceled(restored) {
		t.Fatal("uncancel left the mark on the key's flight")
	}

	ft.committed = append(ft.committed, answered, dropped)
	var forgotten []keys.Key
	ft.settleCommitted(func(f *flight) { forgotten = append(forgotten, f.key) })
	if len(forgotten) != 1 || forgotten[0] != answered {
		t.Fatalf("commit forgot the flights of %v, want only %s's", forgotten, answered)
	}
	for _, k := range []keys.Key{answered, dropped} {
		if ft.isCanceled(k) || ft.busy(k) {
			t.Fatalf("%s still marked after its delete committed", k)
		}
	}
	if len(ft.canceled) != 0 {
		t.Fatalf("%d marks left in the map after the commits", len(ft.canceled))
	}
}
