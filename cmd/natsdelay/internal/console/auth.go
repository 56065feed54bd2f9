package console

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"
)

// Users are who may log in to the console: names and bcrypt hashes of
// their passwords, read from a password file of lines "name:hash", as
// `htpasswd -nB name` writes them.
type Users struct {
	hashes map[string][]byte

	// Checking a password costs a bcrypt comparison, tens of
	// milliseconds by design; a browser sends the password with every
	// request. So a password that matched is remembered, by a hash of
	// the user, the password and a key of this process, and pays bcrypt
	// once; and comparisons of passwords not remembered are rationed, so
	// that guesses cannot take the CPU.
	mu     sync.Mutex
	good   map[[32]byte]bool
	salt   []byte
	guards *rate.Limiter
}

// minCost is the least bcrypt cost a password file may use: bcrypt's
// default.
const minCost = bcrypt.DefaultCost

// maxRemembered bounds how many logins the console remembers.
const maxRemembered = 256

// errBusy is the answer when too many passwords are being checked.
var errBusy = errors.New("too many logins at once: try again in a second")

// LoadUsers reads the password file at path. Every problem is reported,
// each with its line.
func LoadUsers(path string) (*Users, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the password file: %w", err)
	}
	u := &Users{hashes: map[string][]byte{}, good: map[[32]byte]bool{}, salt: make([]byte, 32),
		guards: rate.NewLimiter(10, 10)}
	_, _ = rand.Read(u.salt)
	var bad []error
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		switch cost, err := bcrypt.Cost([]byte(hash)); {
		case !ok || name == "":
			bad = append(bad, fmt.Errorf("line %d: want name:bcrypt-hash, as htpasswd -nB name writes it", n))
		case err != nil:
			bad = append(bad, fmt.Errorf("line %d: user %q: the password is not a bcrypt hash (%v): make it with htpasswd -nB %s", n, name, err, name))
		case cost < minCost:
			bad = append(bad, fmt.Errorf("line %d: user %q: bcrypt cost %d: want %d or more", n, name, cost, minCost))
		case u.hashes[name] != nil:
			bad = append(bad, fmt.Errorf("line %d: user %q: named twice", n, name))
		default:
			u.hashes[name] = []byte(hash)
		}
	}
	if err := sc.Err(); err != nil {
		bad = append(bad, err)
	}
	if len(bad) == 0 && len(u.hashes) == 0 {
		bad = append(bad, errors.New("names no user: add one with htpasswd -nB name >> FILE"))
	}
	if len(bad) > 0 {
		return nil, errors.Join(bad...)
	}
	return u, nil
}

// dummy is compared against when a user is unknown, so that an unknown
// user takes as long to refuse as a wrong password.
var dummy, _ = bcrypt.GenerateFromPassword([]byte("natsdelay"), minCost)

// check returns nil when pass is name's password.
func (u *Users) check(name, pass string) error {
	key := sha256.Sum256([]byte(string(u.salt) + "\x00" + name + "\x00" + pass))
	u.mu.Lock()
	ok := u.good[key]
	u.mu.Unlock()
	if ok {
		return nil
	}
	if !u.guards.Allow() {
		return errBusy
	}
	hash, known := u.hashes[name]
	if !known {
		hash = dummy
	}
	if err := bcrypt.CompareHashAndPassword(hash, []byte(pass)); err != nil || !known {
		return errors.New("wrong user or password")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.good) >= maxRemembered {
		clear(u.good)
	}
	u.good[key] = true
	return nil
}
