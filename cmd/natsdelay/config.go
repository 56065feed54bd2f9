package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// configFile is the --config flag. Before kong resolves the flags it reads
// the file and adds it as a resolver, so the file fills in what neither a
// flag nor an env var set.
type configFile string

// BeforeResolve loads the file; kong calls it when the flag is set, from
// the command line or from NATSDELAY_CONFIG.
func (f configFile) BeforeResolve(ctx *kong.Context, trace *kong.Path, bad *badValues, limits *configLimits) error {
	path, _ := ctx.FlagValue(trace.Flag).(configFile)
	if path == "" {
		return nil
	}
	r, err := loadConfigFile(string(path))
	if err != nil {
		return err
	}
	if err := limits.take(r.path, r.values); err != nil {
		return err
	}
	r.bad = bad
	r.command = ctx.Selected()
	for _, f := range ctx.Flags() {
		if fromFile(f) {
			r.own = append(r.own, f.Name)
		}
	}
	ctx.AddResolver(r)
	return nil
}

// fileResolver resolves flags from a JSON object whose keys are flag names,
// in kebab case (data-dir) or snake case (data_dir). Values are strings,
// numbers or booleans, or for list flags such as --backoff also arrays.
// The one key that is not a flag, limits, is taken out first (see
// configLimits).
//
// Only flags that have an env var may be set in the file: those are the
// settings of a deployment. Per-invocation flags such as pub's --delay have
// neither.
type fileResolver struct {
	path   string
	values map[string]any
	// bad is told to fail at once while the resolver parses a value, so
	// that a bad value in the file is blamed on the file.
	bad *badValues
	// command is the command run, and own the flags of it (and of those
	// above it) that the file may set.
	command *kong.Node
	own     []string
}

func loadConfigFile(path string) (*fileResolver, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	// Numbers stay as written, so 1048576 is not turned into 1.048576e+06.
	dec.UseNumber()
	var values map[string]any
	if err := dec.Decode(&values); err != nil {
		return nil, fmt.Errorf("config file %s: want one JSON object of settings: %w", path, err)
	}
	return &fileResolver{path: path, values: values}, nil
}

// lookup returns the value set for flag, if any.
func (r *fileResolver) lookup(flag *kong.Flag) (key string, v any, ok bool) {
	for _, k := range []string{flag.Name, strings.ReplaceAll(flag.Name, "-", "_")} {
		if v, ok := r.values[k]; ok {
			return k, v, true
		}
	}
	return "", nil, false
}

// Resolve implements kong.Resolver.
func (r *fileResolver) Resolve(ctx *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
	if !fromFile(flag) {
		return nil, nil
	}
	// NB: kong applies env vars before resolvers and then lets resolvers
	// override them; an env var must win over the file, so step aside.
	for _, name := range flag.Envs {
		if _, set := os.LookupEnv(name); set {
			return nil, nil
		}
	}
	key, v, ok := r.lookup(flag)
	if !ok {
		return nil, nil
	}
	s, err := r.text(key, v, flag.IsSlice())
	if err != nil {
		return nil, err
	}
	// Parse it here too, so that a bad value is blamed on the file.
	scratch := reflect.New(flag.Target.Type()).Elem()
	if r.bad != nil {
		r.bad.strict = true
		defer func() { r.bad.strict = false }()
	}
	if err := flag.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: s}), scratch); err != nil {
		// kong names the flag again when it reports this; say it once.
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
		return nil, fmt.Errorf("config file %s, key %q: %w", r.path, key, err)
	}
	if flag.Enum != "" {
		if _, ok := flag.EnumMap()[s]; !ok {
			return nil, fmt.Errorf("config file %s, key %q: %q is not one of %s", r.path, key, s, strings.Join(flag.EnumSlice(), ", "))
		}
	}
	return s, nil
}

// text turns a JSON value into what the flag would have been given on the
// command line.
func (r *fileResolver) text(key string, v any, list bool) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return fmt.Sprint(v), nil
	case []any:
		if !list {
			break
		}
		parts := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("config file %s, key %q: element %d is %v: want a string", r.path, key, i, e)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	}
	want := "a string, number or boolean"
	if list {
		want += ", or an array of strings"
	}
	return "", fmt.Errorf("config file %s, key %q: got %s: want %s", r.path, key, jsonKind(v), want)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%v", v)
}

// Validate implements kong.Resolver: it rejects keys that name no setting,
// so a typo is an error rather than a setting silently left at its default.
// serve takes only its own settings: a key of the bench's there is a
// mistake. A client command takes any command's, since one file (named by
// NATSDELAY_CONFIG) may serve a deployment's serve and its client
// commands. Either way the error lists the keys of the command run.
func (r *fileResolver) Validate(app *kong.Application) error {
	known := map[string]bool{}
	add := func(name string) {
		known[name] = true
		known[strings.ReplaceAll(name, "-", "_")] = true
	}
	for _, name := range r.own {
		add(name)
	}
	if r.command == nil || r.command.Name != "serve" {
		_ = kong.Visit(app, func(n kong.Visitable, next kong.Next) error {
			if f, ok := n.(*kong.Flag); ok && fromFile(f) {
				add(f.Name)
			}
			return next(nil)
		})
	}
	var bad []string
	for k := range r.values {
		if !known[k] {
			bad = append(bad, fmt.Sprintf("%q", k))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	var keys []string
	for _, name := range r.own {
		keys = append(keys, strings.ReplaceAll(name, "-", "_"))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return fmt.Errorf("config file %s: unknown key %s; the keys are flag names: %s", r.path, strings.Join(bad, ", "), strings.Join(keys, ", "))
}

// fromFile reports whether flag may be set in the config file.
func fromFile(flag *kong.Flag) bool {
	return len(flag.Envs) > 0 && flag.Name != "config"
}

// decodeDuration parses a Go duration. It replaces kong's own, which also
// takes bare numbers as nanoseconds: "30" meaning 30ns is never what anyone
// writing --ack-wait 30 meant.
//
// A negative duration such as -1s is taken as the value too, where kong
// would take it for a short flag -1 and say so: it is then refused by the
// command's check, which says what is accepted.
func decodeDuration(ctx *kong.DecodeContext, target reflect.Value) error {
	var s string
	if t := ctx.Scan.Peek(); t.InferredType() == kong.ShortFlagToken && negativeNumber(t.String()) {
		s = ctx.Scan.Pop().String()
	} else if err := ctx.Scan.PopValueInto("duration", &s); err != nil {
		return err
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return &badDuration{value: s}
	}
	target.SetInt(int64(d))
	return nil
}

// badValues keeps the values of serve's setting flags (those with a
// config tag) that do not parse, instead of stopping the parse at the
// first: serve's check then reports them with every other bad setting.
// A value from the config file still fails at once, blamed on the file.
type badValues struct {
	strict bool
	errs   []error
	flags  map[string]bool // the flags with a bad value: --ack-wait
}

// decodeDuration is the duration mapper, keeping a bad value of a setting
// flag for check.
func (b *badValues) decodeDuration(ctx *kong.DecodeContext, target reflect.Value) error {
	err := decodeDuration(ctx, target)
	var bad *badDuration
	if !errors.As(err, &bad) || b.strict || ctx.Value == nil || ctx.Value.Tag == nil || !ctx.Value.Tag.Has("config") {
		return err
	}
	// kong decodes an env var's value through here too; say so, as
	// kong does when it fails on one.
	for _, name := range ctx.Value.Tag.Envs {
		if v, ok := os.LookupEnv(name); ok && strings.Contains(v, bad.value) {
			err = fmt.Errorf("%w (from envar %s=%q)", err, name, v)
			break
		}
	}
	b.errs = append(b.errs, fmt.Errorf("--%s: %w", ctx.Value.Name, err))
	if b.flags == nil {
		b.flags = map[string]bool{}
	}
	b.flags["--"+ctx.Value.Name] = true
	return nil
}

// badDuration is a value that is not a duration.
type badDuration struct{ value string }

func (e *badDuration) Error() string {
	return fmt.Sprintf("%q is not a duration: want a Go duration such as 250ms, 30s or 1h30m", e.value)
}

// negativeNumber reports whether s starts with a minus and a digit: it is
// never a flag, since no flag is named by a digit.
func negativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && s[1] >= '0' && s[1] <= '9'
}

// problems collects every bad setting, so that one run reports them all.
type problems []error

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf(format, args...))
}

func (p problems) err() error { return errors.Join(p...) }
