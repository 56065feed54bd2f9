package console

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The login throttle rations the password checks that cost a bcrypt
// comparison (a password not remembered) so that a guesser slows only
// itself, never the users it guesses at:
//
//   - Each source address (an IPv4 address, an IPv6 /64) has its own
//     budget: sourceBurst checks at once, one more every sourceEvery.
//     Past it, that source is answered 429 and nothing is compared.
//   - Each user of the file has a budget of failures: userBurst, one more
//     every userEvery. Every failed check spends it, from any source.
//     While it is spent, a source that itself failed within failMemory
//     is answered 429 for that user without a comparison; a source that
//     has not failed is still let check, so a guesser on many addresses
//     cannot lock the user out of a machine that never guessed.
//   - The table of sources holds maxSources; a source that was not seen
//     fail for failMemory and whose budget is full again is forgotten to
//     make room (it is the same as a new one). When every place holds a
//     source that failed recently, a new source shares one budget with
//     all the others that found no place, and counts as failing.
//   - At most maxComparing comparisons run at once; the others wait for
//     one, so that guesses from many sources cannot take every core.
//
// A password that matched is remembered (Users.good) and passes without
// a comparison and without the throttle.
const (
	sourceBurst  = 5
	sourceEvery  = 2 * time.Second
	userBurst    = 8
	userEvery    = 10 * time.Second
	failMemory   = 15 * time.Minute
	maxSources   = 4096
	maxComparing = 4
	// sweepEvery bounds how often a full table is swept for sources to
	// forget.
	sweepEvery = time.Second
)

var (
	errSourceBusy = errors.New("too many logins from this address: try again in a few seconds")
	errUserBusy   = errors.New("too many failed logins for this user, this address among them: try again in a minute")
)

// source is what the throttle keeps of one source address.
type source struct {
	budget   *rate.Limiter
	lastFail time.Time // zero when it never failed
}

// throttle is the login throttle described above.
type throttle struct {
	now func() time.Time

	mu       sync.Mutex
	sources  map[netip.Prefix]*source
	overflow *rate.Limiter            // the budget of sources that found no place
	users    map[string]*rate.Limiter // failures, of the users of the file only
	swept    time.Time

	comparing chan struct{}
}

func newThrottle() *throttle {
	return &throttle{now: time.Now, sources: map[netip.Prefix]*source{}, users: map[string]*rate.Limiter{},
		overflow: newSourceBudget(), comparing: make(chan struct{}, maxComparing)}
}

func newSourceBudget() *rate.Limiter { return rate.NewLimiter(rate.Every(sourceEvery), sourceBurst) }

// addUser gives name, a user of the file, its budget of failures.
func (t *throttle) addUser(name string) {
	t.users[name] = rate.NewLimiter(rate.Every(userEvery), userBurst)
}

// sourceKey is the throttle's key of addr: the address itself for IPv4,
// its /64 for IPv6, where one machine holds a whole /64.
func sourceKey(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// admit decides whether a check of name's password from addr may be
// compared, and spends the source's budget if so.
func (t *throttle) admit(name string, addr netip.Addr) error {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	budget, failing := t.overflow, true
	if s := t.source(sourceKey(addr), now); s != nil {
		budget = s.budget
		failing = !s.lastFail.IsZero() && now.Sub(s.lastFail) < failMemory
	}
	if u := t.users[name]; u != nil && failing && u.TokensAt(now) < 1 {
		return errUserBusy
	}
	if !budget.AllowN(now, 1) {
		return errSourceBusy
	}
	return nil
}

// failed records that a check of name's password from addr failed.
func (t *throttle) failed(name string, addr netip.Addr) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sources[sourceKey(addr)]; s != nil {
		s.lastFail = now
	}
	if u := t.users[name]; u != nil {
		u.AllowN(now, 1)
	}
}

// source is key's entry, made if there is room; nil when there is none.
func (t *throttle) source(key netip.Prefix, now time.Time) *source {
	if s := t.sources[key]; s != nil {
		return s
	}
	if len(t.sources) >= maxSources && now.Sub(t.swept) >= sweepEvery {
		t.swept = now
		for k, s := range t.sources {
			if now.Sub(s.lastFail) >= failMemory && s.budget.TokensAt(now) >= sourceBurst {
				delete(t.sources, k)
			}
		}
	}
	if len(t.sources) >= maxSources {
		return nil
	}
	s := &source{budget: newSourceBudget()}
	t.sources[key] = s
	return s
}

// sourceCount is how many sources the table holds.
func (t *throttle) sourceCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sources)
}
