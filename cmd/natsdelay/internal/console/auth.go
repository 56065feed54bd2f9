package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/bcrypt"
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
	// once; and comparisons of passwords not remembered are rationed by
	// source and user (throttle.go), so that guesses can neither take the
	// CPU nor lock anyone out.
	mu       sync.Mutex
	good     map[[32]byte]bool
	salt     []byte
	throttle *throttle
}

// minCost is the least bcrypt cost a password file may use: bcrypt's
// default.
const minCost = bcrypt.DefaultCost

// maxRemembered bounds how many logins the console remembers.
const maxRemembered = 256

// LoadUsers reads the password file at path. Every problem is reported,
// each with its line.
func LoadUsers(path string) (*Users, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the password file: %w", err)
	}
	u := newUsers()
	dummy() // made here, so that no login waits for it
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
			u.add(name, []byte(hash))
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

func newUsers() *Users {
	u := &Users{hashes: map[string][]byte{}, good: map[[32]byte]bool{}, salt: make([]byte, 32), throttle: newThrottle()}
	_, _ = rand.Read(u.salt)
	return u
}

// add lets name in with the password of hash.
func (u *Users) add(name string, hash []byte) {
	u.hashes[name] = hash
	u.throttle.addUser(name)
}

// dummy is compared against when a user is unknown, so that an unknown
// user takes as long to refuse as a wrong password. It is made once, by
// the first LoadUsers, not at package init: a hash at bcrypt's cost takes
// tens of milliseconds of CPU, which every start of the binary would pay,
// the CLI's commands included, though only a console with users needs it.
var dummy = sync.OnceValue(func() []byte {
	h, err := bcrypt.GenerateFromPassword([]byte("natsdelay"), minCost)
	if err != nil {
		// Only a cost out of bcrypt's range fails, and minCost is in it.
		panic(err)
	}
	return h
})

// check returns nil when pass is name's password, checked for a client
// at addr; errSourceBusy or errUserBusy when the throttle refuses to
// compare it.
func (u *Users) check(ctx context.Context, name, pass string, addr netip.Addr) error {
	key := sha256.Sum256([]byte(string(u.salt) + "\x00" + name + "\x00" + pass))
	u.mu.Lock()
	ok := u.good[key]
	u.mu.Unlock()
	if ok {
		return nil
	}
	if err := u.throttle.admit(name, addr); err != nil {
		return err
	}
	select {
	case u.throttle.comparing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	hash, known := u.hashes[name]
	if !known {
		hash = dummy()
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(pass))
	<-u.throttle.comparing
	if err != nil || !known {
		u.throttle.failed(name, addr)
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
