package dist

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The paths the .deb installs.
const (
	installedBin    = "/usr/bin/natsdelay"
	installedUnit   = "/usr/lib/systemd/system/natsdelay.service"
	installedConfig = "/etc/natsdelay/natsdelay.json"
	installedData   = "/var/lib/natsdelay"
)

// checkDeb installs the .deb with dpkg, as root, and checks what it put
// there: the system user, the data dir only it may enter, the unit (which
// systemd-analyze verify accepts), and the binary, which prints its
// version and serves as that user with the default config. The package
// is purged afterwards; a machine where natsdelay is installed already is
// left alone.
func checkDeb(t *testing.T, deb string) {
	need(t, "dpkg", "systemd-analyze")
	if os.Geteuid() != 0 {
		skipOrFail(t, "installing the .deb needs root")
	}
	if exec.Command("dpkg", "-s", "natsdelay").Run() == nil {
		skipOrFail(t, "natsdelay is installed on this machine already: the test does not replace it")
	}
	_, statErr := os.Stat(installedData)
	dataWasThere := statErr == nil
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "natsdelay").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge natsdelay: %v: %s", err, out)
		}
		// The package keeps the data dir, which holds messages; the test's
		// own goes.
		if !dataWasThere {
			os.RemoveAll(installedData)
		}
	})
	runIn(t, "/", "dpkg", "-i", deb)

	uid, gid := systemUser(t)
	checkOwned(t, installedData, uid, gid, 0o700|os.ModeDir)
	checkOwned(t, installedConfig, 0, gid, 0o640)
	checkOwned(t, installedBin, 0, 0, 0o755)
	checkUnit(t)
	checkVersion(t, installedBin)

	// The default config as the service reads it, as its user; only the
	// ports are its own, so that it runs beside anything on the machine.
	serve := exec.Command(installedBin, "serve", "--config", installedConfig,
		"--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	serve.Dir = "/"
	serve.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	serveAndPublish(t, serve)
	if _, err := os.Stat(installedData + "/pebble"); err != nil {
		t.Errorf("serve with the default config kept no store in %s: %v", installedData, err)
	}
}

// systemUser returns the ids of the user the package made, and checks it
// is a system user that cannot log in.
func systemUser(t *testing.T) (uid, gid uint32) {
	u, err := user.Lookup("natsdelay")
	if err != nil {
		t.Fatalf("the package made no user natsdelay: %v", err)
	}
	id, _ := strconv.Atoi(u.Uid)
	g, _ := strconv.Atoi(u.Gid)
	if id == 0 || id >= 1000 {
		t.Errorf("user natsdelay has uid %d, want a system user's (1 to 999)", id)
	}
	passwd := runIn(t, "/", "getent", "passwd", "natsdelay")
	if !strings.HasSuffix(strings.TrimSpace(passwd), ":/usr/sbin/nologin") {
		t.Errorf("user natsdelay: %q, want the shell /usr/sbin/nologin", passwd)
	}
	return uint32(id), uint32(g)
}

// checkOwned wants path owned by uid and gid with mode.
func checkOwned(t *testing.T, path string, uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != uid || st.Gid != gid || fi.Mode() != mode {
		t.Errorf("%s: owner %d:%d mode %v, want %d:%d %v", path, st.Uid, st.Gid, fi.Mode(), uid, gid, mode)
	}
}

// checkUnit runs systemd-analyze verify on the installed unit, which
// checks its settings and that the binary it starts is there (it warns of
// a bad setting on stderr and still exits 0), scores its sandbox with
// systemd-analyze security, and checks the settings the hardening rests
// on.
func checkUnit(t *testing.T) {
	cmd := exec.Command("systemd-analyze", "verify", installedUnit)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "natsdelay.service:") {
		t.Errorf("systemd-analyze verify %s: %v:\n%s", installedUnit, err, out)
	}
	// systemd's own score of the sandbox, 0 (locked down) to 10: the
	// threshold is in tenths.
	if out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--threshold=20", installedUnit).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: %v, want an exposure of at most 2.0:\n%s", err, out)
	}
	unit, err := os.ReadFile(installedUnit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"User=natsdelay", "ExecStart=" + installedBin + " serve --config " + installedConfig,
		"ProtectSystem=strict", "ReadWritePaths=" + installedData, "NoNewPrivileges=true",
		"ProtectHome=true", "PrivateTmp=true", "CapabilityBoundingSet=\n", "TimeoutStopSec=", "LimitNOFILE=",
	} {
		if !strings.Contains(string(unit), "\n"+want) {
			t.Errorf("the unit has no line %q", want)
		}
	}
}
