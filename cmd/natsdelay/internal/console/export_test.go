package console

import (
	"time"

	"golang.org/x/crypto/bcrypt"
)

// SetLoginClock makes u's login throttle read now instead of time.Now;
// call it before u serves.
func SetLoginClock(u *Users, now func() time.Time) { u.throttle.now = now }

// CheapUsers is a password file of one user whose hash has bcrypt's
// least cost, which LoadUsers refuses: a test of the throttle compares
// many passwords, each at a full cost taking a second under the race
// detector on a busy machine.
func CheapUsers(name, pass string) *Users {
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	u := newUsers()
	u.add(name, hash)
	return u
}

// LoginSources is how many source addresses u's login throttle holds.
func LoginSources(u *Users) int { return u.throttle.sourceCount() }
