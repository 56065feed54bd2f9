package console_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// TestConsole_Limits_SetGrouped checks, over real HTTP against a real
// service, that the limits page's set form keeps what a limit bounds: a
// limit of each value of a header (a tenant) and one of a pattern's
// subjects together are stored as such (LIMITS.GET through the API
// agrees) and marked in the table; a form with both is refused with the
// service's reason, stores nothing, and comes back as it was filled in.
func TestConsole_Limits_SetGrouped(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	_, page, _ := get(t, s.base+"/ui/limits", "", "")
	csrf := csrfOf(t, page)
	if !strings.Contains(page, `name="key_header"`) || !strings.Contains(page, `name="whole"`) {
		t.Fatalf("limits page without the grouping fields:\n%s", page)
	}
	stored := func(pattern string) (wire.Limit, error) {
		t.Helper()
		var l wire.Limit
		err := s.api(t, wire.VerbLimitsGet, wire.PatternRequest{Pattern: pattern}, &l)
		return l, err
	}
	set := func(form url.Values) (int, string) {
		t.Helper()
		form.Set("csrf", csrf)
		code, body, _ := post(t, s.base+"/ui/limits/set", form, "", "")
		return code, body
	}

	code, body := set(url.Values{"pattern": {">"}, "key_header": {"Tenant"}, "max_in_flight": {"50"}, "rate": {"100"}})
	mustStatus(t, "set a limit of each Tenant", code, http.StatusSeeOther, body)
	if l, err := stored(">"); err != nil || l != (wire.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 50, Rate: 100}) {
		t.Fatalf("LIMITS.GET > = %+v, %v; want 50 in flight at 100/s of each Tenant", l, err)
	}
	code, body = set(url.Values{"pattern": {"shop.>"}, "whole": {"on"}, "max_in_flight": {"20"}})
	mustStatus(t, "set a limit of shop.> together", code, http.StatusSeeOther, body)
	if l, err := stored("shop.>"); err != nil || l != (wire.Limit{Pattern: "shop.>", Whole: true, MaxInFlight: 20}) {
		t.Fatalf("LIMITS.GET shop.> = %+v, %v; want 20 in flight of its subjects together", l, err)
	}
	_, page, _ = get(t, s.base+"/ui/limits", "", "")
	for _, want := range []string{`<code>&gt;</code> <span class="badge">each Tenant</span>`, `<code>shop.&gt;</code> <span class="badge">together</span>`} {
		if !strings.Contains(page, want) {
			t.Fatalf("limits page does not mark the grouped limit with %s:\n%s", want, page)
		}
	}

	code, body = set(url.Values{"pattern": {"both.>"}, "whole": {"on"}, "key_header": {"Tenant"}, "max_in_flight": {"5"}})
	mustStatus(t, "set a limit both together and of each Tenant", code, http.StatusBadRequest, body)
	if !strings.Contains(html.UnescapeString(body), `"whole" and "key_header": want one of them`) {
		t.Fatalf("refusal without the service's reason:\n%s", body)
	}
	for _, want := range []string{`name="key_header" value="Tenant"`, `name="whole" checked`, `name="pattern" value="both.&gt;"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("refused form not kept as filled in (%s):\n%s", want, body)
		}
	}
	if l, err := stored("both.>"); wire.Code(err) != http.StatusNotFound {
		t.Fatalf("LIMITS.GET both.> after the refusal = %+v, %v; want none", l, err)
	}
}
