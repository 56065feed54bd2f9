package main

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/bridge"
)

// A serve flag that is a service setting carries the tag config:"Name",
// the name of the field of bridge.Config that it sets: a field of
// bridge.Config itself, or a dotted path into a config it nests by name
// (Delivery, Repository, Expiry) such as Expiry.Interval. applySettings copies the flags there, and
// settingProblems reports the config's validation errors under the flags
// that set them. So a new setting is a flag with its tag and a field in
// the one config struct that owns it, validated by that struct.

// setting is one serve flag that sets a field of bridge.Config.
type setting struct {
	flag  string        // --ack-wait
	field string        // AckWait, or Expiry.Interval
	value reflect.Value // the flag's value on serveCmd
	// defaulted is set when the flag has a non-zero default: zero would
	// then mean the config's default, not what was asked for.
	defaulted bool
}

// settings lists the service settings among c's flags.
func (c *serveCmd) settings() []setting {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	var out []setting
	for i := range t.NumField() {
		f := t.Field(i)
		field, ok := f.Tag.Lookup("config")
		if !ok {
			continue
		}
		name := f.Tag.Get("name")
		if name == "" {
			name = kebab(f.Name)
		}
		if c.bad != nil && c.bad.flags["--"+name] {
			continue // reported as it was given; its value is not known
		}
		def := f.Tag.Get("default")
		out = append(out, setting{
			flag: "--" + name, field: field, value: v.Field(i),
			defaulted: def != "" && def != "0" && def != "0s" && !strings.HasPrefix(def, "${"),
		})
	}
	return out
}

// kebab turns a Go field name into its flag name as kong does:
// MaxControlLine becomes max-control-line.
func kebab(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 && !(s[i-1] >= 'A' && s[i-1] <= 'Z') {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// field finds the field of b at path, following embedded structs.
func field(b *bridge.Config, path string) reflect.Value {
	v := reflect.ValueOf(b).Elem()
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
	}
	return v
}

// applySettings copies every setting flag of c into b, and returns the
// problems of values that do not fit their field.
func (c *serveCmd) applySettings(b *bridge.Config) []error {
	var errs []error
	for _, s := range c.settings() {
		dst := field(b, s.field)
		if !dst.IsValid() {
			panic("serve: flag " + s.flag + " names no field " + s.field + " of bridge.Config")
		}
		src := s.value
		switch {
		case s.defaulted && src.IsZero():
			errs = append(errs, fmt.Errorf("%s %v: want a value other than 0; leave the flag out for its default", s.flag, show(src)))
			continue
		case dst.Kind() == reflect.Uint32 && src.CanInt() && (src.Int() < 0 || src.Int() > math.MaxUint32):
			errs = append(errs, fmt.Errorf("%s %d: want 0 (unlimited) or a count up to %d", s.flag, src.Int(), uint32(math.MaxUint32)))
			continue
		}
		dst.Set(src.Convert(dst.Type()))
	}
	return errs
}

// settingProblems turns the validation errors of b into problems under the
// flags that set the fields: "--ack-wait -1s: AckWait (-1s) must be > 0".
// An error about no flag's field is kept as it is.
func (c *serveCmd) settingProblems(b bridge.Config) []error {
	var out []error
	ss := c.settings()
	for _, err := range leaves(b.Validate()) {
		msg := err.Error()
		found := false
		for _, s := range ss {
			name := s.field[strings.LastIndexByte(s.field, '.')+1:]
			loc := regexp.MustCompile(`\b` + name + `(\[\d+\])? \(`).FindStringIndex(msg)
			if loc == nil {
				continue
			}
			out = append(out, fmt.Errorf("%s %v: %s", s.flag, show(s.value), withoutField(msg[loc[0]:])))
			found = true
			break
		}
		if !found {
			out = append(out, err)
		}
	}
	return out
}

// fieldRef is how a config's Validate names a field and its value:
// Name (value) or Name[i] (value).
var fieldRef = regexp.MustCompile(`^\w+(?:\[(\d+)\])? \(`)

// withoutField is msg, which starts with a config field and its value as
// Validate writes them, in the words of the command line, which has named
// the flag and its value already: the field and value go, and an index
// becomes the place of the value in the list: "MaxInFlight (-1) must be
// > 0" is "must be > 0", "Backoff[1] (-2s) must be >= 0" is "value 2
// (-2s) must be >= 0". Any other msg is returned as it is.
func withoutField(msg string) string {
	m := fieldRef.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	rest := msg[m[1]:]
	// A quoted value may hold a parenthesis.
	if q, err := strconv.QuotedPrefix(rest); err == nil {
		rest = rest[len(q):]
	}
	end := strings.Index(rest, ") ")
	if end < 0 {
		return msg
	}
	value := msg[m[1] : len(msg)-len(rest)+end]
	rest = rest[end+2:]
	if m[2] < 0 {
		return rest
	}
	i, _ := strconv.Atoi(msg[m[2]:m[3]])
	return fmt.Sprintf("value %d (%s) %s", i+1, value, rest)
}

// show writes a flag's value as it is given: durations joined by commas,
// strings quoted.
func show(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case []time.Duration:
		return joinDurations(x)
	case string:
		return fmt.Sprintf("%q", x)
	default:
		return fmt.Sprint(x)
	}
}

// leaves flattens joined and wrapped-joined errors into the errors that
// each report one problem.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	if inner := errors.Unwrap(err); inner != nil {
		if _, ok := inner.(interface{ Unwrap() []error }); ok {
			return leaves(inner)
		}
	}
	return []error{err}
}
