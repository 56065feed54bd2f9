package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
)

// limitsKey is the config file's key of the limits that exist from the
// start. It names no flag: a list of limits does not fit on a command
// line, nor in an environment variable.
const limitsKey = "limits"

// configLimits are the limits of the config file, for serve. parse binds
// one for the config file's hook to fill.
type configLimits struct {
	path string
	list []wire.Limit
}

// take reads the limits key of values, if any, and removes it, so that
// the flags' resolver never sees it. Each element is an object with the
// fields of LIMITS.SET; rate is a number per second, or a string as
// --rate takes it.
func (c *configLimits) take(path string, values map[string]any) error {
	v, ok := values[limitsKey]
	if !ok {
		return nil
	}
	delete(values, limitsKey)
	c.path = path
	elems, ok := v.([]any)
	if !ok {
		return fmt.Errorf(`config file %s, key %q: got %s: want a list of limits such as [{"pattern": "orders.>", "rate": "50/s"}]`, path, limitsKey, jsonKind(v))
	}
	for i, e := range elems {
		l, err := decodeLimit(e)
		if err != nil {
			return fmt.Errorf("config file %s, key %q, %s: %w", path, limitsKey, element(i, l.Pattern), err)
		}
		c.list = append(c.list, l)
	}
	return nil
}

// element names the i-th limit of the file, with its pattern if it has
// one.
func element(i int, pattern string) string {
	if pattern == "" {
		return fmt.Sprintf("element %d", i)
	}
	return fmt.Sprintf("element %d (pattern %q)", i, pattern)
}

// limitFields are the fields of a limit in the config file.
var limitFields = []string{"pattern", "max_in_flight", "rate", "burst", "paused", "whole", "key_header"}

// decodeLimit reads one limit of the config file. On error the limit
// returned has the pattern, if that was read, for the message.
func decodeLimit(v any) (wire.Limit, error) {
	var l wire.Limit
	m, ok := v.(map[string]any)
	if !ok {
		return l, fmt.Errorf(`got %s: want an object such as {"pattern": "orders.>", "max_in_flight": 100}`, jsonKind(v))
	}
	if p, ok := m["pattern"].(string); ok {
		l.Pattern = p
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		x := m[k]
		var err error
		switch k {
		case "pattern":
			if _, ok := x.(string); !ok {
				err = fmt.Errorf(`"pattern" %s: want a string`, showJSON(x))
			}
		case "max_in_flight":
			l.MaxInFlight, err = wholeNumber(k, x)
		case "burst":
			l.Burst, err = wholeNumber(k, x)
		case "rate":
			l.Rate, err = configRate(x)
		case "paused", "whole":
			b, ok := x.(bool)
			if !ok {
				err = fmt.Errorf(`%q %s: want true or false`, k, showJSON(x))
			}
			if k == "paused" {
				l.Paused = b
			} else {
				l.Whole = b
			}
		case "key_header":
			if l.KeyHeader, ok = x.(string); !ok {
				err = fmt.Errorf(`"key_header" %s: want a header name such as Tenant`, showJSON(x))
			}
		default:
			err = fmt.Errorf("unknown field %q: the fields are %s", k, strings.Join(limitFields, ", "))
		}
		if err != nil {
			return l, err
		}
	}
	return l, nil
}

// showJSON writes a JSON value as the file has it.
func showJSON(x any) string {
	b, err := json.Marshal(x)
	if err != nil {
		return fmt.Sprint(x)
	}
	return string(b)
}

func wholeNumber(name string, x any) (int, error) {
	n, ok := x.(json.Number)
	if ok {
		if i, err := n.Int64(); err == nil && i >= math.MinInt32 && i <= math.MaxInt32 {
			return int(i), nil
		}
	}
	return 0, fmt.Errorf("%q %s: want a whole number", name, showJSON(x))
}

// configRate reads a rate of the config file: a number per second, or a
// string as --rate takes it.
func configRate(x any) (float64, error) {
	switch r := x.(type) {
	case json.Number:
		if f, err := r.Float64(); err == nil {
			return f, nil // its range is the service's to judge
		}
	case string:
		f, err := parseRate(r)
		if err != nil {
			return 0, fmt.Errorf(`"rate" %q: %w`, r, err)
		}
		return f, nil
	}
	return 0, fmt.Errorf(`"rate" %s: want a number per second, or a string such as "50/s", "3000/m" or "10/h"`, showJSON(x))
}

// check adds to p what is wrong with each limit, as the service would
// answer LIMITS.SET with it, for an in-flight window of window.
func (c *configLimits) check(p *problems, window int) {
	first := map[string]int{}
	for i, l := range c.list {
		where := fmt.Sprintf("config file %s, key %q, %s", c.path, limitsKey, element(i, l.Pattern))
		for _, bad := range bridge.CheckLimit(l, window) {
			p.add("%s: %s", where, bad)
		}
		if j, ok := first[l.Pattern]; ok && l.Pattern != "" {
			p.add("%s: given twice, first as element %d", where, j)
			continue
		}
		first[l.Pattern] = i
	}
}

// stored is the limits as the service takes them.
func (c *configLimits) stored() []delaystore.Limit {
	out := make([]delaystore.Limit, len(c.list))
	for i, l := range c.list {
		out[i] = bridge.StoredLimit(l)
	}
	return out
}
