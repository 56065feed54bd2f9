package console_test

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// stepping is a second console on s's service, served over real HTTP,
// that answers each request of a bulk action after one step: so a test
// sees an operation go from request to request by its cursor, as a large
// one does.
func stepping(t testing.TB, s *served) string {
	t.Helper()
	c, err := console.New(console.Config{Addr: "127.0.0.1:0", BulkStepTime: time.Nanosecond, SampleEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.SetService(s.srv.Service())
	hs := httptest.NewServer(c)
	t.Cleanup(func() {
		hs.Close()
		c.Close()
	})
	return hs.URL
}

var (
	hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	formOpen    = regexp.MustCompile(`<form [^>]*id="([^"]+)"`)
)

// formFields are the hidden fields of the form id in page, and whether
// the page has that form.
func formFields(page, id string) (url.Values, bool) {
	start := -1
	for _, m := range formOpen.FindAllStringSubmatchIndex(page, -1) {
		if page[m[2]:m[3]] == id {
			start = m[0]
		}
	}
	if start < 0 {
		return nil, false
	}
	end := strings.Index(page[start:], "</form>")
	v := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(page[start:start+end], -1) {
		v.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return v, true
}

// number is the count the page shows in the element id.
func number(t testing.TB, page, id string) int {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `">([0-9,]+)<`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no #%s in the page:\n%s", id, page)
	}
	n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	return n
}

// listed is how many messages subject has pending, read over the API.
func (s *served) listed(t testing.TB, subject string) int {
	t.Helper()
	var rep wire.ListReply
	limit := 1000
	if err := s.api(t, wire.VerbList, wire.ListRequest{Subject: subject, Limit: &limit}, &rep); err != nil {
		t.Fatalf("LIST %s: %v", subject, err)
	}
	return len(rep.Messages)
}

// TestConsole_BulkCancel_DryRunCountEqualsRealCount checks, over real
// HTTP against a real service, that a bulk cancel by a filter (subject
// wildcard and a header) first counts its selection without changing
// anything, then, confirmed, cancels exactly that many in steps that
// follow the cursor from request to request, leaving every message
// outside the filter pending.
func TestConsole_BulkCancel_DryRunCountEqualsRealCount(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	base := stepping(t, s)
	for i := range 23 {
		s.schedule(t, fmt.Sprintf("bulk.a.%d", i%3), []byte("x"), "Delay", "1h", "Tenant", "acme")
	}
	for i := range 3 {
		s.schedule(t, fmt.Sprintf("bulk.a.%d", i), []byte("y"), "Delay", "1h", "Tenant", "globex")
	}
	for range 4 {
		s.schedule(t, "bulk.b.1", []byte("z"), "Delay", "1h", "Tenant", "acme")
	}

	q := url.Values{"run": {"dry"}, "verb": {"cancel"}, "subject": {"bulk.a.*"}, "headers": {"Tenant: acme"}, "step": {"5"}}
	code, page, _ := get(t, base+"/ui/bulk?"+q.Encode(), "", "")
	mustStatus(t, "dry run", code, http.StatusOK, page)
	dry := number(t, page, "dry-n")
	if dry != 23 {
		t.Fatalf("dry run counted %d, want 23", dry)
	}
	if n := s.listed(t, "bulk.a.0") + s.listed(t, "bulk.a.1") + s.listed(t, "bulk.a.2"); n != 26 {
		t.Fatalf("after the dry run %d pending on bulk.a.*, want all 26", n)
	}
	form, ok := formFields(page, "confirm-form")
	if !ok {
		t.Fatalf("no confirm form after the dry run:\n%s", page)
	}

	requests := 0
	for ok {
		requests++
		if requests > 20 {
			t.Fatal("the operation did not end in 20 requests")
		}
		code, page, _ = post(t, base+"/ui/bulk/run", form, "", "")
		mustStatus(t, "run", code, http.StatusOK, page)
		form, ok = formFields(page, "continue")
	}
	if got := number(t, page, "run-n"); got != dry || !strings.Contains(page, "<h2>Done</h2>") {
		t.Fatalf("the operation says it canceled %d (done: %v), want the dry run's %d", got, strings.Contains(page, "<h2>Done</h2>"), dry)
	}
	if requests < 5 {
		t.Errorf("the operation took %d requests, want at least 5: steps of 5 messages, one a request", requests)
	}
	for i := range 3 {
		if n := s.listed(t, fmt.Sprintf("bulk.a.%d", i)); n != 1 {
			t.Errorf("bulk.a.%d has %d pending, want its globex one", i, n)
		}
	}
	if n := s.listed(t, "bulk.b.1"); n != 4 {
		t.Errorf("bulk.b.1 has %d pending, want its 4: outside the filter", n)
	}
}

// TestConsole_Bulk_WithoutCSRF_ChangesNothing checks that the confirm
// POST of a bulk action without its CSRF token, or with another, is
// refused with 403 and cancels nothing.
func TestConsole_Bulk_WithoutCSRF_ChangesNothing(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	for range 5 {
		s.schedule(t, "nocsrf.1", []byte("x"), "Delay", "1h")
	}
	q := url.Values{"run": {"dry"}, "verb": {"cancel"}, "subject": {"nocsrf.1"}}
	_, page, _ := get(t, s.base+"/ui/bulk?"+q.Encode(), "", "")
	form, ok := formFields(page, "confirm-form")
	if !ok || number(t, page, "dry-n") != 5 {
		t.Fatalf("no confirm form for 5 messages:\n%s", page)
	}
	for _, token := range []string{"", "forged"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Del("csrf")
		if token != "" {
			f.Set("csrf", token)
		}
		code, body, _ := post(t, s.base+"/ui/bulk/run", f, "", "")
		mustStatus(t, "bulk cancel with CSRF token "+strconv.Quote(token), code, http.StatusForbidden, body)
	}
	if n := s.listed(t, "nocsrf.1"); n != 5 {
		t.Fatalf("%d pending after the refused POSTs, want all 5", n)
	}
}

// TestConsole_DeadLetter_ReplayDeliversOnce checks, over real HTTP
// against a real service, that a message termed by its consumer is listed
// on the dead letters page with its reason, attempts and last answer and
// shown with its payload; that its replay is delivered once, under a new
// tag; that a second replay is refused as not found; and that delete
// removes another from the list.
func TestConsole_DeadLetter_ReplayDeliversOnce(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	got := make(chan *nats.Msg, 16)
	seen := map[string]bool{} // NB: the callbacks of a subscription run one at a time
	sub, err := s.nc.Subscribe("dl.>", func(m *nats.Msg) {
		answer := "+ACK"
		if strings.HasPrefix(string(m.Data), "die") && !seen[string(m.Data)] {
			answer = "+TERM broken"
		}
		seen[string(m.Data)] = true
		// NB: the answer as a request: its reply says it was applied.
		if _, err := s.nc.Request(m.Reply, []byte(answer), 5*time.Second); err != nil {
			t.Errorf("answer %s: %v", answer, err)
		}
		got <- m
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	tag := s.schedule(t, "dl.one", []byte("die <b>once</b>"), "Delay", "1ms", "Trace-Id", "t-1")
	other := s.schedule(t, "dl.two", []byte("die too"), "Delay", "1ms")
	for range 2 {
		receive(t, got, "the deliveries that die")
	}
	deadCount := func() int {
		var rep wire.DeadListReply
		if err := s.api(t, wire.VerbDeadList, wire.DeadListRequest{}, &rep); err != nil {
			t.Fatal(err)
		}
		return len(rep.DeadLetters)
	}
	if n := deadCount(); n != 2 {
		t.Fatalf("%d dead letters, want 2", n)
	}

	code, page, _ := get(t, s.base+"/ui/dead?subject=dl.>", "", "")
	mustStatus(t, "dead letters", code, http.StatusOK, page)
	page = html.UnescapeString(page)
	for _, want := range []string{tag, other, "term", "+TERM broken"} {
		if !strings.Contains(page, want) {
			t.Errorf("dead letters page: no %q in\n%s", want, page)
		}
	}
	code, page, _ = get(t, s.base+"/ui/deadletter?tag="+tag, "", "")
	mustStatus(t, "dead letter", code, http.StatusOK, page)
	if !strings.Contains(page, "die &lt;b&gt;once&lt;/b&gt;") || !strings.Contains(page, "t-1") {
		t.Errorf("dead letter page: want the payload as text and the header:\n%s", page)
	}

	csrf := csrfOf(t, page)
	code, page, resp := post(t, s.base+"/ui/dead/replay", url.Values{"csrf": {csrf}, "tag": {tag}}, "", "")
	mustStatus(t, "replay", code, http.StatusSeeOther, page)
	loc := resp.Header.Get("Location")
	if !strings.HasPrefix(loc, "/ui/dead?done=replayed&what=") || strings.Contains(loc, tag) {
		t.Errorf("replay redirects to %q, want the list with the new message's tag", loc)
	}
	if m := receive(t, got, "the replay"); m.Subject != "dl.one" || string(m.Data) != "die <b>once</b>" || m.Header.Get(wire.HeaderAttempt) != "1" {
		t.Errorf("replayed %s %q attempt %s, want dl.one's payload at attempt 1", m.Subject, m.Data, m.Header.Get(wire.HeaderAttempt))
	}
	code, page, _ = post(t, s.base+"/ui/dead/replay", url.Values{"csrf": {csrf}, "tag": {tag}}, "", "")
	mustStatus(t, "a second replay", code, http.StatusNotFound, page)
	// NB: a second delivery of the replay would come before this one,
	// which is scheduled after it on the same subject.
	s.schedule(t, "dl.one", []byte("sentinel"), "Delay", "1ms")
	if m := receive(t, got, "the sentinel"); string(m.Data) != "sentinel" {
		t.Fatalf("after the replay got %q, want the sentinel: the replay was delivered twice", m.Data)
	}

	code, page, _ = post(t, s.base+"/ui/dead/delete", url.Values{"csrf": {csrf}, "tag": {other}}, "", "")
	mustStatus(t, "delete", code, http.StatusSeeOther, page)
	if n := deadCount(); n != 0 {
		t.Errorf("%d dead letters after replay and delete, want 0", n)
	}
}

// receive is the next message on ch, within 10 s.
func receive(t testing.TB, ch <-chan *nats.Msg, what string) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing delivered in 10s", what)
		return nil
	}
}

// TestConsole_Message_RescheduleAndFire checks the message page's
// reschedule and fire now, over real HTTP against a real service: a shift
// moves the message's fire time by it (new tag), fire now delivers it;
// and, as the API refuses them, a message in flight and an occurrence of
// a recurring schedule are refused with 409 and a sentence saying why,
// and a form with neither at nor shift with 400, each changing nothing.
func TestConsole_Message_RescheduleAndFire(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	tag := s.schedule(t, "move.one", []byte("m"), "Delay", "1h")
	_, page, _ := get(t, s.base+"/ui/message?tag="+tag, "", "")
	csrf := csrfOf(t, page)
	if !strings.Contains(page, `id="reschedule-form"`) || !strings.Contains(page, `id="fire-form"`) {
		t.Fatalf("message page without the reschedule and fire forms:\n%s", page)
	}

	code, body, _ := post(t, s.base+"/ui/reschedule", url.Values{"csrf": {csrf}, "tag": {tag}}, "", "")
	mustStatus(t, "reschedule without at or shift", code, http.StatusBadRequest, body)
	code, body, resp := post(t, s.base+"/ui/reschedule", url.Values{"csrf": {csrf}, "tag": {tag}, "shift": {"2h"}}, "", "")
	mustStatus(t, "reschedule", code, http.StatusSeeOther, body)
	if !strings.Contains(resp.Header.Get("Location"), "done=rescheduled") {
		t.Errorf("reschedule redirects to %q", resp.Header.Get("Location"))
	}
	var list wire.ListReply
	if err := s.api(t, wire.VerbList, wire.ListRequest{Subject: "move.one"}, &list); err != nil || len(list.Messages) != 1 {
		t.Fatalf("LIST move.one: %v %+v", err, list)
	}
	moved := list.Messages[0]
	at, _ := time.Parse(time.RFC3339Nano, moved.FireAt)
	if moved.Tag == tag || time.Until(at) < 2*time.Hour+50*time.Minute {
		t.Errorf("rescheduled: tag %s (was %s), fires at %s; want a new tag about 3h from now", moved.Tag, tag, moved.FireAt)
	}

	got := make(chan *nats.Msg, 4)
	sub, err := s.nc.Subscribe("move.one", func(m *nats.Msg) { _ = m.Respond([]byte("+ACK")); got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	code, body, _ = post(t, s.base+"/ui/fire", url.Values{"csrf": {csrf}, "tag": {moved.Tag}}, "", "")
	mustStatus(t, "fire", code, http.StatusSeeOther, body)
	if m := receive(t, got, "the fired message"); string(m.Data) != "m" {
		t.Errorf("fired: got %q", m.Data)
	}

	// In flight: delivered to a consumer that does not answer.
	held := make(chan *nats.Msg, 1)
	hsub, err := s.nc.Subscribe("move.held", func(m *nats.Msg) { held <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hsub.Unsubscribe() }()
	flying := s.schedule(t, "move.held", []byte("h"), "Delay", "1ms")
	hm := receive(t, held, "the held message")
	code, body, _ = post(t, s.base+"/ui/fire", url.Values{"csrf": {csrf}, "tag": {flying}}, "", "")
	mustStatus(t, "fire a message in flight", code, http.StatusConflict, body)
	if !strings.Contains(body, "in flight") {
		t.Errorf("fire in flight: the page does not say it is in flight:\n%s", body)
	}
	_ = hm.Respond([]byte("+ACK"))

	occ := s.schedule(t, "move.cron", []byte("c"), "Delay-Cron", "0 9 * * *")
	code, body, _ = post(t, s.base+"/ui/reschedule", url.Values{"csrf": {csrf}, "tag": {occ}, "shift": {"1h"}}, "", "")
	mustStatus(t, "reschedule an occurrence", code, http.StatusConflict, body)
	if !strings.Contains(body, "recurring schedule") {
		t.Errorf("reschedule an occurrence: the page does not say why:\n%s", body)
	}
	if !s.pending(t, occ) {
		t.Error("the occurrence is gone after a refused reschedule")
	}
}
