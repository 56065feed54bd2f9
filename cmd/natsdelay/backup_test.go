package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runInProcess runs natsdelay with args in this process and returns its
// exit code and output.
func runInProcess(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestBackup_ThenRestore_ServesTheMessages drives natsdelay backup and
// restore: the backup of a running serve restores into a new data dir
// (the other engine), a serve on it lists the messages, and restore into
// a data dir that holds anything fails with an error that says why,
// leaving it as it was.
func TestBackup_ThenRestore_ServesTheMessages(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	tags := []string{
		schedule(t, url, "restore.jobs", "one", "--delay", "1h"),
		schedule(t, url, "restore.jobs", "two", "--delay", "2h", "--id", "job-2"),
	}
	file := filepath.Join(t.TempDir(), "jobs.backup")
	code, out, errOut := runInProcess("backup", file, "--nats", url)
	if code != 0 || !regexp.MustCompile(`^wrote .*jobs\.backup: \d+ keys, \d+ bytes\n$`).MatchString(out) {
		t.Fatalf("backup: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runInProcess("restore", file, "--data-dir", full)
	if code != 1 || !strings.Contains(errOut, "not empty") || !strings.Contains(errOut, "notes.txt") {
		t.Fatalf("restore into a data dir with a file: exit %d, stderr %q; want 1 and an error naming the file", code, errOut)
	}
	if es, _ := os.ReadDir(full); len(es) != 1 {
		t.Fatalf("the data dir holds %d entries after a refused restore", len(es))
	}

	dir := filepath.Join(t.TempDir(), "restored")
	code, out, errOut = runInProcess("restore", file, "--data-dir", dir, "--engine", "bolt")
	if code != 0 || !strings.HasPrefix(out, "restored ") {
		t.Fatalf("restore: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	url2 := serveInProcess(t, dir, "--engine", "bolt").URL()
	code, ls, errOut := runInProcess("ls", "restore.jobs", "--nats", url2)
	if code != 0 {
		t.Fatalf("ls on the restored service: exit %d: %s", code, errOut)
	}
	for _, tag := range tags {
		if !strings.Contains(ls, tag) {
			t.Fatalf("ls on the restored service:\n%s\nwant tag %s", ls, tag)
		}
	}
}
