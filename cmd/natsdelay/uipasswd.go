package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"
)

// uiPasswdCmd writes a line of the console's --ui-auth password file, as
// htpasswd -nB does, so that no htpasswd is needed.
type uiPasswdCmd struct {
	Name string `arg:"" help:"The user's name: no colon, no white space."`
	Cost int    `help:"bcrypt cost, from 10 (the least the console takes) to 31: each step doubles the time of a check." default:"10" env:"-"`
}

func (c *uiPasswdCmd) check() error {
	var p problems
	if c.Name == "" || strings.ContainsFunc(c.Name, func(r rune) bool { return r == ':' || r <= ' ' || r == 0x7f }) {
		p.add("name %q: want a name without colons, white space or control characters, such as admin", c.Name)
	}
	if c.Cost < bcrypt.DefaultCost || c.Cost > bcrypt.MaxCost {
		p.add("--cost %d: want %d to %d", c.Cost, bcrypt.DefaultCost, bcrypt.MaxCost)
	}
	return p.err()
}

// Run reads the password, from the terminal without echo (twice, to be
// sure of it) or else the first line of stdin, and prints name:hash.
func (c *uiPasswdCmd) Run(e *env) error {
	pass, err := readPassword(e)
	if err != nil {
		return err
	}
	if len(pass) == 0 {
		return errors.New("the password is empty: the console would let no one in with it")
	}
	hash, err := bcrypt.GenerateFromPassword(pass, c.Cost)
	if err != nil {
		// NB: bcrypt refuses passwords over 72 bytes rather than cut them.
		return fmt.Errorf("hash the password: %w", err)
	}
	_, err = fmt.Fprintf(e.stdout, "%s:%s\n", c.Name, hash)
	return err
}

// readPassword reads the password: from a terminal on stdin with the
// prompts on stderr and no echo, else the first line of stdin without
// its line end.
func readPassword(e *env) ([]byte, error) {
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return promptPassword(e.stderr, int(f.Fd()))
	}
	line, err := bufio.NewReader(e.stdin).ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read the password from stdin: %w", err)
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

func promptPassword(w io.Writer, fd int) ([]byte, error) {
	fmt.Fprint(w, "Password: ")
	pass, err := term.ReadPassword(fd)
	fmt.Fprintln(w)
	if err != nil {
		return nil, fmt.Errorf("read the password: %w", err)
	}
	fmt.Fprint(w, "Again: ")
	again, err := term.ReadPassword(fd)
	fmt.Fprintln(w)
	if err != nil {
		return nil, fmt.Errorf("read the password: %w", err)
	}
	if !bytes.Equal(pass, again) {
		return nil, errors.New("the two passwords differ: nothing written")
	}
	return pass, nil
}
