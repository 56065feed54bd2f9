package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/nats-io/nats.go"
)

// browserEnv, set to "required" (as .ci/run sets it), makes a missing
// Chromium a failure of the browser tests instead of a skip.
const browserEnv = "NATSDELAY_BROWSER_TESTS"

// screenshotEnv names a directory to keep the tests' screenshots in;
// without it they go to a temporary directory, named in the test log.
const screenshotEnv = "NATSDELAY_SCREENSHOTS"

// chromium finds the browser, or skips the test (fails it when
// NATSDELAY_BROWSER_TESTS=required).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "the browser tests need Chromium: apt-get install -y chromium (Debian's package); .ci/run installs it"
	if os.Getenv(browserEnv) == "required" {
		t.Fatalf("%s=required, and %s", browserEnv, msg)
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium at 1280 px, with what it reports that a
// test must not see: JavaScript dialogs (alert), exceptions, and console
// errors (a Content-Security-Policy violation is one).
type browser struct {
	ctx   context.Context
	shots string

	mu       sync.Mutex
	dialogs  []string
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // NB: CI runs as root, where Chromium's sandbox does not start
		chromedp.WindowSize(1280, 900),
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{shots: os.Getenv(screenshotEnv)}
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithListener(b.listen))
	b.ctx = ctx
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc() // waits for the browser to exit
		wg.Wait()
	})
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	t.Logf("screenshots in %s", b.shots)
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdplog.Enable, cdp.Empty{})
		return err
	})); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	// A dialog is answered, so that the page goes on and the test fails
	// on it rather than hanging; the goroutine ends with the context.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

// listen records what the page must not do; it runs on the browser's
// reading goroutine and returns at once.
func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, e.Message)
	case *runtime.EventExceptionThrown:
		b.problems = append(b.problems, "exception: "+e.ExceptionDetails.Text)
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError {
			b.problems = append(b.problems, "console: "+e.Entry.Text)
		}
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			b.problems = append(b.problems, "console.error")
		}
	}
}

// do runs actions, failing t on error.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression on the page.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// text is the text of the element sel selects, as rendered.
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// shot writes a screenshot of the whole page to name.png.
func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// clean fails t if the browser saw a dialog, an exception or an error.
func (b *browser) clean(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		t.Errorf("the page opened dialogs %q: a script ran", b.dialogs)
	}
	if len(b.problems) > 0 {
		t.Errorf("the browser reported %q", b.problems)
	}
}

// accessible checks the page for what keyboard and screen reader users
// need: every visible input has a label and every button a name, and the
// first Tab reaches the skip link.
func (b *browser) accessible(t *testing.T, what string) {
	t.Helper()
	unlabeled := eval[[]string](t, b, `[...document.querySelectorAll('input:not([type=hidden])')].filter(i => !i.labels || i.labels.length === 0).map(i => i.name)
		.concat([...document.querySelectorAll('button')].filter(b => b.textContent.trim() === '').map(() => 'button'))`)
	if len(unlabeled) > 0 {
		t.Errorf("%s: inputs without a label: %q", what, unlabeled)
	}
	b.do(t, what+": keyboard", chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`), chromedp.KeyEvent(kb.Tab))
	if focused := eval[string](t, b, `document.activeElement.className`); focused != "skip" {
		t.Errorf("%s: the first Tab focuses %q, want the skip link", what, focused)
	}
}

// submit clicks the button sel and waits for the page the form's answer
// loads (after its redirect), and returns the outcome line it shows.
func (b *browser) submit(t *testing.T, sel string) string {
	t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(chromedp.CSS(sel)))); err != nil {
		t.Fatalf("submit %s: %v", sel, err)
	}
	return eval[string](t, b, `(document.querySelector('p.done') || {textContent: ''}).textContent`)
}

// TestBrowser_Console checks the console in a real browser against a real
// service with data: every page loads, with the counts the service has;
// the subject filter narrows the list as one types (htmx); a subject
// lists its messages; a message shows its headers and its payload, a
// <script> payload as text that runs nothing and a binary one as hex; the
// cancel form cancels it, and it is gone from its subject's list and from
// the service; the schedules show their next times in their zone and UTC;
// a limit set and paused in the form shows in the list; the live tail of
// a service without --events says how to turn them on; the layout fits a
// phone's width; and no page breaks its Content-Security-Policy or throws.
// Screenshots of each page are written as it goes.
func TestBrowser_Console(t *testing.T) {
	b := newBrowser(t)
	s := serve(t, "127.0.0.1:0", true, nil)
	for _, subj := range []string{"orders.eu.1", "orders.eu.2", "orders.us.1", "invoices.1", "invoices.2"} {
		s.schedule(t, subj, []byte(`{"order":"`+subj+`","total":42}`), "Delay", "1h", "Trace-Id", "t-"+subj)
	}
	xss := s.schedule(t, "orders.eu.1", []byte(`<script>alert(1)</script>`), "Delay", "2h", "Note", `<img src=x onerror=alert(2)>`)
	bin := s.schedule(t, "blobs.1", []byte{0, 1, 2, 0xff, 'h', 'i'}, "Delay", "3h")
	s.schedule(t, "reports.daily", []byte("report"), "Delay-Cron", "0 9 * * 1-5", "Delay-TZ", "Europe/Paris", "Delay-Limit", "20", "Delay-Id", "weekday-report")
	base := s.base + "/ui/"
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	// Overview: the counts are the service's.
	b.do(t, "overview", chromedp.Navigate(base), chromedp.WaitVisible(css("#pending")))
	if pending, ready := b.text(t, "#pending"), b.text(t, "#ready"); pending != "8" || !strings.HasPrefix(ready, "ready") {
		t.Errorf("overview: pending %q, readiness %q; want 8 and ready", pending, ready)
	}
	b.accessible(t, "overview")
	b.shot(t, "overview")

	// Subjects, then the filter typed in: the list narrows without a
	// submit, and the address follows it.
	b.do(t, "subjects", chromedp.Navigate(base+"subjects"), chromedp.WaitVisible(css("#subjects")))
	if rows := eval[int](t, b, `document.querySelectorAll('#subjects tbody tr').length`); rows != 7 {
		t.Errorf("subjects: %d rows, want 7", rows)
	}
	b.accessible(t, "subjects")
	b.shot(t, "subjects")
	b.do(t, "filter", chromedp.SendKeys(css("#filter"), "orders.eu.*"),
		chromedp.Poll[chromedp.Void](`location.search.includes('filter=orders.eu.') && document.querySelectorAll('#subjects tbody tr').length === 2`, chromedp.WithPollingTimeout(15*time.Second)))
	if subjects := eval[[]string](t, b, `[...document.querySelectorAll('#subjects tbody th')].map(th => th.textContent)`); strings.Join(subjects, " ") != "orders.eu.1 orders.eu.2" {
		t.Errorf("filter orders.eu.*: subjects %q", subjects)
	}

	// A subject's messages, in fire order: the JSON one first.
	b.do(t, "subject", chromedp.Click(css(`#subjects a[href$="subject=orders.eu.1"]`)), chromedp.WaitVisible(css("#messages")))
	if rows, last := eval[int](t, b, `document.querySelectorAll('#messages tbody tr').length`), b.text(t, "#messages tbody tr:last-child code"); rows != 2 || last != xss {
		t.Errorf("orders.eu.1: %d messages, the last %q; want 2, the last %s", rows, last, xss)
	}
	b.shot(t, "subject")

	// The <script> payload and the header with markup show as text.
	b.do(t, "message", chromedp.Click(css(`#messages a[href$="tag=`+xss+`"]`)), chromedp.WaitVisible(css("#payload")))
	payload := b.text(t, "#payload")
	note := eval[string](t, b, `[...document.querySelectorAll('th')].find(th => th.textContent === 'Note').nextElementSibling.textContent`)
	scripts := eval[int](t, b, `document.querySelectorAll('main script, main img').length`)
	if payload != `<script>alert(1)</script>` || note != `<img src=x onerror=alert(2)>` || scripts != 0 {
		t.Errorf("message: payload %q, Note %q, %d script or img elements; want both as text and no element", payload, note, scripts)
	}
	b.accessible(t, "message")
	b.shot(t, "message")

	// Cancel it: back on the subject, it is gone from the list, and the
	// service has it no more.
	b.do(t, "confirm", chromedp.Click(css("#confirm")))
	if done := b.submit(t, "#cancel"); done != "Canceled "+xss+"." {
		t.Errorf("after cancel: %q", done)
	}
	listed := eval[bool](t, b, `[...document.querySelectorAll('#messages code')].some(c => c.textContent === '`+xss+`')`)
	if listed || s.pending(t, xss) {
		t.Errorf("after cancel: listed %v, pending %v; want gone from both", listed, s.pending(t, xss))
	}

	// A binary payload is hex.
	b.do(t, "binary", chromedp.Navigate(base+"message?tag="+bin), chromedp.WaitVisible(css("#payload.hex")))
	if hexDump := b.text(t, "#payload"); !strings.Contains(hexDump, "00 01 02 ff 68 69") {
		t.Errorf("binary payload: %q, want its hex", hexDump)
	}

	// Schedules: the next five times, in Paris and in UTC.
	b.do(t, "schedules", chromedp.Navigate(base+"schedules"), chromedp.WaitVisible(css("#schedule-list")))
	times := eval[[]string](t, b, `[...document.querySelectorAll('#schedule-list ol.times li')].map(li => li.innerText)`)
	if len(times) != 5 || !strings.Contains(times[0], "09:00:00 CE") || !strings.Contains(times[0], ":00:00Z") {
		t.Errorf("schedules: next times %q, want five at 09:00 Paris time with their UTC", times)
	}
	b.accessible(t, "schedules")
	b.shot(t, "schedules")

	// Limits: set one in the form, pause it from the list.
	b.do(t, "limits", chromedp.Navigate(base+"limits"), chromedp.WaitVisible(css("#set-limit")),
		chromedp.SendKeys(css("#pattern"), "orders.>"), chromedp.SendKeys(css("#rate"), "50"))
	if done := b.submit(t, `#set-limit button[type=submit]`); done != "Set the limit of orders.>." {
		t.Errorf("set a limit: %q", done)
	}
	if done := b.submit(t, `#limits button`); done != "Paused orders.>." {
		t.Errorf("pause: %q", done)
	}
	if limits := b.text(t, "#limits"); !strings.Contains(limits, "orders.>") || !strings.Contains(limits, "50") || !strings.Contains(limits, "paused") {
		t.Errorf("limits: %q, want orders.> at 50/s, paused", limits)
	}
	b.accessible(t, "limits")
	b.shot(t, "limits")

	// The live tail, with events off: it says so, and how to turn them on.
	b.do(t, "tail off", chromedp.Navigate(base+"tail"), chromedp.WaitVisible(css("#tail-off")))
	if off := b.text(t, "#tail-off"); !strings.Contains(off, "--events") {
		t.Errorf("tail with events off: %q, want how to turn them on", off)
	}
	b.shot(t, "tail-off")

	// A phone: nothing wider than the screen.
	b.do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)), chromedp.Navigate(base), chromedp.WaitVisible(css("#pending")))
	if eval[bool](t, b, `document.documentElement.scrollWidth > window.innerWidth`) {
		t.Error("overview at 390 px: the page is wider than the screen")
	}
	b.shot(t, "overview-phone")
	b.do(t, "phone subjects", chromedp.Navigate(base+"subjects"), chromedp.WaitVisible(css("#subjects")))
	if eval[bool](t, b, `document.documentElement.scrollWidth > window.innerWidth`) {
		t.Error("subjects at 390 px: the page is wider than the screen")
	}
	b.clean(t)
}

// TestBrowser_LiveTail checks the live tail in a real browser against a
// real service with --events: the page opens its stream and says what it
// watches; a message scheduled through ingest while the page is open
// shows its scheduled, delivered and acked events as rows, newest first,
// with its tag, subject and a Delay-Id of markup shown as text that runs
// nothing; a message outside the filter shows nothing; nothing was
// dropped; and the page keeps to its Content-Security-Policy, with the
// keyboard and labels it needs. A screenshot is written.
func TestBrowser_LiveTail(t *testing.T) {
	b := newBrowser(t)
	s := serve(t, "127.0.0.1:0", true, nil, withEvents)
	sub, err := s.nc.Subscribe("tail.>", func(m *nats.Msg) { _ = m.Respond([]byte("+ACK")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	b.do(t, "tail", chromedp.Navigate(s.base+"/ui/tail?subject=tail.%3E"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#tail').dataset.state === 'live'`, chromedp.WithPollingTimeout(15*time.Second)))
	if status := b.text(t, "#tail-status"); status != "Watching $DELAY.EVENT.*.tail.>" {
		t.Errorf("tail: status %q", status)
	}
	b.accessible(t, "tail")

	const id = `<img src=x onerror=alert(1)><script>alert(2)</script>`
	s.schedule(t, "elsewhere.1", []byte("not watched"), "Delay", "100ms")
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	tag := s.schedule(t, "tail.web", []byte(`<script>alert(3)</script>`), "Delay", "300ms", "Delay-Id", id,
		"Traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	b.do(t, "events arrive", chromedp.Poll[chromedp.Void](`document.querySelectorAll('#tail tbody tr').length >= 3`, chromedp.WithPollingTimeout(15*time.Second)))
	rows := eval[[][]string](t, b, `[...document.querySelectorAll('#tail tbody tr')].map(r => [...r.cells].map(c => c.textContent))`)
	var kinds []string
	for _, r := range rows {
		// Time, kind, subject, id, attempt, fire at, detail, trace, tag.
		kinds = append(kinds, r[1])
		if r[2] != "tail.web" || r[3] != id || r[7] != traceID || r[8] != tag {
			t.Errorf("tail row %q: want subject tail.web, the id as text, trace %s, tag %s", r, traceID, tag)
		}
	}
	// Newest first: scheduled at the bottom, and the ACK is told after
	// its delivery unless it beat the delivery's flush.
	if len(kinds) != 3 || kinds[2] != "scheduled" || !(kinds[0] == "acked" && kinds[1] == "delivered" || kinds[0] == "delivered" && kinds[1] == "acked") {
		t.Errorf("tail: kinds %q, newest first; want scheduled, then delivered and acked", kinds)
	}
	if n := eval[int](t, b, `document.querySelectorAll('#tail script, #tail img').length`); n != 0 {
		t.Errorf("tail: %d script or img elements from an event, want none", n)
	}
	if dropped := b.text(t, "#tail-dropped"); dropped != "0 dropped" {
		t.Errorf("tail: %q, want 0 dropped", dropped)
	}
	if !eval[bool](t, b, `document.getElementById('tail-empty').hidden`) {
		t.Error("tail: still says no event yet")
	}
	b.do(t, "blur", chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`))
	b.shot(t, "tail")

	// The tag links to the message's page, the subject to its list.
	b.do(t, "tail link", chromedp.Click(css(`#tail tbody tr:last-child a[href$="subject=tail.web"]`)), chromedp.WaitVisible(css("h1")))
	if h1 := b.text(t, "h1"); h1 != "Subject tail.web" {
		t.Errorf("the subject's link: %q", h1)
	}
	b.clean(t)
}

// TestBrowser_BulkAndDeadLetters checks the bulk actions and the dead
// letters in a real browser against a real service: a bulk cancel by a
// subject wildcard shows its dry-run count and sample first, and only
// then its confirm button; confirmed, it runs step by step (one step a
// request, htmx asking for the next) to the dry run's count, and the
// messages are gone from their subject's list while the others stay; the
// overview's dead count links to the dead letters, where a dead letter
// opens with its reason and payload and, replayed, is delivered again.
// No page breaks its Content-Security-Policy or throws. Screenshots of
// the new pages are written.
func TestBrowser_BulkAndDeadLetters(t *testing.T) {
	b := newBrowser(t)
	s := serve(t, "127.0.0.1:0", true, nil)
	stepped := stepping(t, s) + "/ui/"
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	for i := range 12 {
		s.schedule(t, fmt.Sprintf("web.bulk.%d", i%2), []byte(fmt.Sprintf(`{"n":%d}`, i)), "Delay", "1h")
	}
	s.schedule(t, "web.keep", []byte("stays"), "Delay", "1h")

	// The form, then its dry run: a count, a sample, the confirm button.
	b.do(t, "bulk", chromedp.Navigate(stepped+"bulk"), chromedp.WaitVisible(css("#bulk-form")))
	b.accessible(t, "bulk")
	b.do(t, "bulk form", chromedp.SendKeys(css("#subject"), "web.bulk.*"), chromedp.SendKeys(css("#step"), "5"))
	b.shot(t, "bulk")
	if _, err := chromedp.Run(b.ctx, chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(css("#dry-run")))); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	b.do(t, "dry run", chromedp.WaitVisible(css("#dry-n")))
	b.accessible(t, "bulk dry run")
	if n, samples := b.text(t, "#dry-n"), eval[int](t, b, `document.querySelectorAll('#sample tbody tr').length`); n != "12" || samples != 10 {
		t.Errorf("dry run: count %q and %d sampled, want 12 and 10", n, samples)
	}
	if got := s.listed(t, "web.bulk.0") + s.listed(t, "web.bulk.1"); got != 12 {
		t.Errorf("after the dry run %d pending, want 12", got)
	}
	b.shot(t, "bulk-dry-run")

	// Confirmed: the steps follow one another to the end.
	b.do(t, "confirm", chromedp.Click(css("#confirm")),
		chromedp.Poll[chromedp.Void](`(document.querySelector('#run h2') || {}).textContent === 'Done'`, chromedp.WithPollingTimeout(15*time.Second)))
	if n := b.text(t, "#run-n"); n != "12" {
		t.Errorf("bulk cancel: canceled %q, want the dry run's 12", n)
	}
	b.shot(t, "bulk-done")
	b.do(t, "subject after", chromedp.Navigate(stepped+"subject?subject=web.bulk.0"), chromedp.WaitVisible(css("#empty")))
	if got := s.listed(t, "web.bulk.0") + s.listed(t, "web.bulk.1"); got != 0 || s.listed(t, "web.keep") != 1 {
		t.Errorf("after the bulk cancel: %d pending on web.bulk.*, %d on web.keep; want 0 and 1", got, s.listed(t, "web.keep"))
	}

	// A dead letter: termed at its first delivery, replayed from its
	// page, delivered again.
	got := make(chan *nats.Msg, 4)
	first := true
	sub, err := s.nc.Subscribe("web.dead", func(m *nats.Msg) {
		answer := "+ACK"
		if first {
			answer, first = "+TERM not today", false
		}
		if _, err := s.nc.Request(m.Reply, []byte(answer), 5*time.Second); err != nil {
			t.Errorf("answer %s: %v", answer, err)
		}
		got <- m
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	s.schedule(t, "web.dead", []byte(`<script>alert(1)</script>`), "Delay", "1ms", "Trace-Id", "dead-1")
	receive(t, got, "the delivery that dies")

	b.do(t, "overview", chromedp.Navigate(s.base+"/ui/"), chromedp.WaitVisible(css("#dead a")))
	if n := b.text(t, "#dead a"); n != "1" {
		t.Errorf("overview: dead letters %q, want 1", n)
	}
	b.do(t, "dead letters", chromedp.Click(css("#dead a")), chromedp.WaitVisible(css("#dead tbody")))
	if row := b.text(t, "#dead tbody tr"); !strings.Contains(row, "web.dead") || !strings.Contains(row, "+TERM not today") {
		t.Errorf("dead letters: row %q, want web.dead and its last answer", row)
	}
	b.accessible(t, "dead letters")
	b.shot(t, "dead")
	b.do(t, "dead letter", chromedp.Click(css("#dead tbody a")), chromedp.WaitVisible(css("#payload")))
	if p, reason := b.text(t, "#payload"), b.text(t, "#reason"); p != `<script>alert(1)</script>` || !strings.Contains(reason, "not today") {
		t.Errorf("dead letter: payload %q, reason %q", p, reason)
	}
	b.accessible(t, "dead letter")
	b.shot(t, "deadletter")
	if done := b.submit(t, "#replay"); !strings.HasPrefix(done, "Replayed the dead letter as ") {
		t.Errorf("after replay: %q", done)
	}
	if m := receive(t, got, "the replay"); string(m.Data) != `<script>alert(1)</script>` {
		t.Errorf("replayed %q", m.Data)
	}
	if !eval[bool](t, b, `!!document.getElementById('empty')`) {
		t.Error("dead letters after the replay: the list is not empty")
	}
	b.clean(t)
}
