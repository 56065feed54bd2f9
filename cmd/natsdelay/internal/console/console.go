// Package console is natsdelay's web console: server-rendered pages under
// /ui/ on serve's HTTP listener, one per concern (overview, subjects and
// their messages, schedules, limits, bulk actions, dead letters, the live
// tail of lifecycle events), that read and change the service through the
// same methods its API answers with, so that a page shows and does
// exactly what the matching API verb would.
//
// The console changes data, so it guards itself: on a listener that is
// not on a loopback address it is off unless a password file names who
// may come in (HTTP Basic, bcrypt); on loopback without one it answers
// only requests addressed to a loopback host (no DNS rebinding). Every
// change is a POST that carries a CSRF token and passes Go's cross-origin
// protection; every answer sets a Content-Security-Policy that allows
// only the console's own embedded script and style.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
)

// Prefix is where the console is served on the HTTP listener.
const Prefix = "/ui/"

// Service is what the console reads and changes: *bridge.Service. Each
// page asks only for its own part of it, so that a page added later
// brings its own small interface.
type Service interface {
	overviewSource
	subjectsSource
	schedulesSource
	scheduleCtlSource
	limitsSource
	tailSource
	bulkSource
	deadSource
	moveSource
}

// Config is a console's settings.
type Config struct {
	// Addr is the address the HTTP listener listens on, as it listens
	// (an IP and a port): it decides whether the console may run without
	// Users.
	Addr string
	// Users, if not nil, are who may come in; nil lets in whoever reaches
	// a loopback listener, and turns the console off on any other.
	Users  *Users
	Logger *slog.Logger
	// SampleEvery is how often the rates are sampled. Default 5s.
	SampleEvery time.Duration
	// Samples is how many samples the overview keeps: Samples times
	// SampleEvery is how far back its rates go. Default 60.
	Samples int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// BulkStepTime is how long one request of a bulk action runs steps
	// before it answers with where it stands, and the page asks for the
	// next ones. Default 1s.
	BulkStepTime time.Duration
	// TailIdle is how long a live tail's stream stays open with no event
	// to send. Default DefaultTailIdle.
	TailIdle time.Duration
}

// DefaultTailIdle is how long a live tail's stream with no event stays
// open by default: a client that holds streams and reads nothing keeps
// their places no longer, and a browser's page opens a new stream after
// tailRetry.
const DefaultTailIdle = 2 * time.Minute

// Console serves the pages. Create it with New, give it the service with
// SetService once it runs, and Close it.
type Console struct {
	cfg Config
	// off, when set, is why the console refuses every request.
	off string

	svc   atomic.Pointer[Service] // nil until the service runs
	mux   *http.ServeMux
	pages map[string]*template.Template
	// csrfKey signs the CSRF tokens; new at every start, so a form from
	// before a restart is refused and the page must be loaded again.
	csrfKey []byte
	cross   *http.CrossOriginProtection

	rates *rates
	tails *tails
	stop  context.CancelFunc
	done  chan struct{}
	once  sync.Once
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns a console for cfg and starts its rate sampler; the caller
// calls Close.
func New(cfg Config) (*Console, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 5 * time.Second
	}
	if cfg.Samples <= 0 {
		cfg.Samples = 60
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BulkStepTime <= 0 {
		cfg.BulkStepTime = time.Second
	}
	if cfg.TailIdle <= 0 {
		cfg.TailIdle = DefaultTailIdle
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), pages: map[string]*template.Template{},
		csrfKey: make([]byte, 32), cross: http.NewCrossOriginProtection(), rates: newRates(cfg.Samples), tails: newTails(), done: make(chan struct{})}
	if _, err := rand.Read(c.csrfKey); err != nil {
		return nil, fmt.Errorf("console: CSRF key: %w", err)
	}
	if cfg.Users == nil && !loopback(cfg.Addr) {
		c.off = fmt.Sprintf("the console is off: the HTTP listener %s is not on a loopback address, and --ui-auth names no password file to let anyone in", cfg.Addr)
		cfg.Logger.Warn(c.off)
	}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	c.routeOverview()
	c.routeSubjects()
	c.routeSchedules()
	c.routeScheduleCtl()
	c.routeLimits()
	c.routeBulk()
	c.routeDead()
	c.routeMove()
	c.routeTail()
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.sample(ctx)
	return c, nil
}

// SetService makes the pages read s, from now on.
func (c *Console) SetService(s Service) { c.svc.Store(&s) }

// Close ends the live tails' streams and stops the rate sampler, and
// waits for them.
func (c *Console) Close() {
	c.StopTail()
	c.once.Do(func() {
		c.stop()
		<-c.done
	})
}

// Off is why the console refuses every request, or "" when it serves.
func (c *Console) Off() string { return c.off }

// service is the running service, or nil while it starts.
func (c *Console) service() Service {
	if p := c.svc.Load(); p != nil {
		return *p
	}
	return nil
}

// csp allows the console's own script and style and nothing else: no
// inline script or style, no eval, no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// ServeHTTP answers a request under Prefix: headers first, then the
// gate (off, the host, the user), then the CSRF checks of a POST, then
// the page.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if c.off != "" {
		http.Error(w, c.off, http.StatusForbidden)
		return
	}
	user := ""
	if c.cfg.Users == nil {
		// NB: no password, so the listener's being on loopback is the
		// only gate: a page of another site that resolves its own name
		// to 127.0.0.1 (DNS rebinding) must not get through it.
		if !loopbackHost(r.Host) {
			http.Error(w, "the console answers only requests to a loopback host, such as 127.0.0.1 or localhost, when --ui-auth is not set", http.StatusForbidden)
			return
		}
	} else {
		name, pass, ok := r.BasicAuth()
		if !ok {
			unauthorized(w, "log in with a user of the --ui-auth password file")
			return
		}
		switch err := c.cfg.Users.check(r.Context(), name, pass, remoteAddr(r)); {
		case errors.Is(err, errSourceBusy), errors.Is(err, errUserBusy):
			c.cfg.Logger.Warn("console: login throttled", "user", name, "remote", r.RemoteAddr, "why", err)
			w.Header().Set("Retry-After", retryAfter(err))
			http.Error(w, err.Error(), http.StatusTooManyRequests)
			return
		case err != nil:
			c.cfg.Logger.Warn("console: login refused", "user", name, "remote", r.RemoteAddr)
			unauthorized(w, "wrong user or password")
			return
		}
		user = name
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := c.cross.Check(r); err != nil {
			http.Error(w, "refused: a cross-origin request", http.StatusForbidden)
			return
		}
		got := r.Header.Get("X-CSRF-Token")
		if got == "" {
			got = r.PostFormValue("csrf")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(c.csrfToken(user))) != 1 {
			http.Error(w, "refused: the form's CSRF token is missing or stale; load the page again", http.StatusForbidden)
			return
		}
	}
	c.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
}

type userKey struct{}

// remoteAddr is the address of r's client, as the connection has it (a
// proxy in front is one client), or the zero Addr when it has none.
func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

// retryAfter is the Retry-After of a throttled login, in seconds: when
// the budget it ran out of has room again.
func retryAfter(err error) string {
	if errors.Is(err, errUserBusy) {
		return itoa(int(userEvery / time.Second))
	}
	return itoa(int(sourceEvery / time.Second))
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="natsdelay console", charset="UTF-8"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// csrfToken is the CSRF token of user's forms: an HMAC of the user under
// this process's key.
func (c *Console) csrfToken(user string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte("natsdelay console csrf\x00" + user))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// loopback reports whether addr, host:port, listens on a loopback IP
// only.
func loopback(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().IsLoopback()
}

// loopbackHost reports whether a request's Host names a loopback
// address: localhost or a loopback IP.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// navItem is one entry of the navigation.
type navItem struct {
	Path, Title string
	Current     bool
}

// nav lists the pages; a page added later is one more entry.
var nav = []navItem{
	{Path: Prefix, Title: "Overview"},
	{Path: Prefix + "subjects", Title: "Subjects"},
	{Path: Prefix + "schedules", Title: "Schedules"},
	{Path: Prefix + "limits", Title: "Limits"},
	{Path: Prefix + "bulk", Title: "Bulk actions"},
	{Path: Prefix + "dead", Title: "Dead letters"},
	{Path: Prefix + "tail", Title: "Live tail"},
}

// view is what every page's template gets.
type view struct {
	Title string
	Nav   []navItem
	CSRF  string
	User  string
	// Done says what the last action did, from its redirect.
	Done string
	// Err is set when the page could not be read, or an action was
	// refused: its code and text, as the API would answer.
	Err  *wire.ServiceError
	Data any
}

func (c *Console) parseTemplates() error {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		c.pages[strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")] = t
	}
	return nil
}

// render writes the page name with data, under status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name, navPath, title string, data any, failure error) {
	user, _ := r.Context().Value(userKey{}).(string)
	v := view{Title: title, CSRF: c.csrfToken(user), User: user, Done: c.doneText(r, user), Data: data}
	for _, n := range nav {
		n.Current = n.Path == navPath
		v.Nav = append(v.Nav, n)
	}
	if failure != nil {
		v.Err = wire.NewServiceError(failure)
		if status == http.StatusOK {
			status = httpStatus(failure)
		}
	}
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		c.cfg.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// httpStatus is the HTTP status of an error of the service: its API code
// (400, 404, 409, 503), or 500 for one outside that vocabulary.
func httpStatus(err error) int {
	switch code := wire.Code(err); code {
	case 400, 404, 409, 503:
		return code
	default:
		return http.StatusInternalServerError
	}
}

// errStarting is what a page says before the service runs.
var errStarting = fmt.Errorf("%w: the service is starting", wire.ErrUnavailable)

// redirect sends the browser, after a POST, to the page at target with
// what was done, signed: a 303, so that reloading it does not post again.
func (c *Console) redirect(w http.ResponseWriter, r *http.Request, target, done, what string) {
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	user, _ := r.Context().Value(userKey{}).(string)
	http.Redirect(w, r, target+sep+"done="+done+"&what="+urlQuery(what)+"&sig="+c.doneSig(user, done, what), http.StatusSeeOther)
}

// doneSig signs an outcome for user: an HMAC under this process's key,
// so that a page shows only outcomes the console itself redirected to,
// and a link of anyone else's (the console's origin, with a line of its
// author's) shows nothing.
func (c *Console) doneSig(user, done, what string) string {
	m := hmac.New(sha256.New, c.csrfKey)
	m.Write([]byte("natsdelay console done\x00" + user + "\x00" + done + "\x00" + what))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}

// doneTexts are the sentences of the actions' outcomes; the redirect
// names one and the object, signed, and a page shows only these
// sentences, of outcomes the console signed.
var doneTexts = map[string]string{
	"canceled":           "Canceled %s.",
	"limit-set":          "Set the limit of %s.",
	"limit-removed":      "Removed the limit of %s.",
	"paused":             "Paused %s.",
	"resumed":            "Resumed %s.",
	"schedule-cancel":    "Canceled the schedule %s.",
	"schedule-paused":    "Paused the schedule %s.",
	"schedule-resumed":   "Resumed the schedule %s.",
	"schedule-triggered": "Triggered one extra occurrence of the schedule %s.",
	"schedule-skipped":   "The schedule %s skips its next occurrences: its next times below leave them out.",
	"rescheduled":        "Rescheduled the message: it is now %s.",
	"fired":              "Fired the message: it is due now, as %s.",
	"replayed":           "Replayed the dead letter as %s.",
	"dead-deleted":       "Deleted the dead letter %s.",
}

// doneText is the sentence of the outcome r's query names, when the
// console signed it for user; "" otherwise.
func (c *Console) doneText(r *http.Request, user string) string {
	q := r.URL.Query()
	done, what := q.Get("done"), q.Get("what")
	f, ok := doneTexts[done]
	if !ok || !hmac.Equal([]byte(q.Get("sig")), []byte(c.doneSig(user, done, what))) {
		return ""
	}
	return fmt.Sprintf(f, what)
}

// Assert that the service implements what the console reads.
var _ Service = (*bridge.Service)(nil)

// badRequest is a 400 of the console's own, worded as the API's.
func badRequest(format string, args ...any) error {
	return wireErr(wire.ErrBadRequest, format, args...)
}

// wireErr is an error of the console's own in the API's vocabulary: code
// is one of wire's errors (wire.ErrNotFound ...).
func wireErr(code error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", code, fmt.Sprintf(format, args...))
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"rate":   fmtRate,
	"count":  fmtCount,
	"counti": func(n int) string { return fmtCount(uint64(max(n, 0))) },
	"itoa":   itoa,
	"inc":    func(n int) int { return n + 1 },
	"join":   strings.Join,
	// traceID is the trace id of the traceparent among a message's
	// headers, or "": the trace of the publish that scheduled it.
	"traceID": traceIDOf,
}

// traceIDOf is the W3C trace id, 32 hex digits, of the traceparent among
// headers h, its name in any case; "" when there is none well formed.
func traceIDOf(h map[string][]string) string {
	for name, vs := range h {
		if len(vs) > 0 && strings.EqualFold(name, wire.HeaderTraceParent) {
			if id, ok := delaystore.TraceIDOf(vs[0]); ok {
				return hex.EncodeToString(id[:])
			}
		}
	}
	return ""
}
