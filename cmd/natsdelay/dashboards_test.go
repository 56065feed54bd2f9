package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"
)

// ruleFile is Prometheus' rule file format, as promtool check rules reads
// it: groups of alerting and recording rules.
type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Limit    int    `yaml:"limit"`
		Rules    []struct {
			Alert         string            `yaml:"alert"`
			Record        string            `yaml:"record"`
			Expr          string            `yaml:"expr"`
			For           string            `yaml:"for"`
			KeepFiringFor string            `yaml:"keep_firing_for"`
			Labels        map[string]string `yaml:"labels"`
			Annotations   map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// exposed returns the series names a running service exposes on /metrics,
// histogram and summary series included, each with its label names.
func exposed(t testing.TB, base string) map[string]map[string]bool {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]map[string]bool{}
	for name, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := []string{name}
		switch f.GetType().String() {
		case "HISTOGRAM":
			names = append(names, name+"_bucket", name+"_sum", name+"_count")
			labels["le"] = true
		case "SUMMARY":
			names = append(names, name+"_sum", name+"_count")
			labels["quantile"] = true
		}
		for _, n := range names {
			out[n] = labels
		}
	}
	return out
}

var (
	// seriesRe finds the series an expression selects, with their matchers.
	seriesRe = regexp.MustCompile(`\b((?:natsdelay|process|go)_[a-zA-Z0-9_]+|up)\b(\{[^}]*\})?`)
	// matcherRe finds the label names in a selector's matchers.
	matcherRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// checkExpr fails t for every series expr selects that the service does
// not expose, and every label it matches on that the series lacks, besides
// the instance and job labels Prometheus adds. It also checks that the
// brackets balance. It does not parse PromQL.
func checkExpr(t testing.TB, where, expr string, series map[string]map[string]bool) {
	t.Helper()
	depth := map[rune]int{}
	for _, r := range expr {
		switch r {
		case '(', '{', '[':
			depth[r]++
		case ')':
			depth['(']--
		case '}':
			depth['{']--
		case ']':
			depth['[']--
		}
	}
	for r, d := range depth {
		if d != 0 {
			t.Errorf("%s: %q: unbalanced %c", where, expr, r)
		}
	}
	found := seriesRe.FindAllStringSubmatch(expr, -1)
	if len(found) == 0 {
		t.Errorf("%s: %q selects no natsdelay, process or go series", where, expr)
	}
	for _, m := range found {
		name, sel := m[1], m[2]
		if name == "up" {
			continue // Prometheus' own, per scrape target
		}
		labels, ok := series[name]
		if !ok {
			t.Errorf("%s: %q uses %s, which /metrics does not have", where, expr, name)
			continue
		}
		for _, lm := range matcherRe.FindAllStringSubmatch(sel, -1) {
			if l := lm[1]; !labels[l] && l != "instance" && l != "job" {
				t.Errorf("%s: %q matches %s on label %s, which it does not have", where, expr, name, l)
			}
		}
	}
}

// TestDocs_DashboardAndAlerts_MetricsExist checks docs/alerts.yml and the
// Grafana dashboards under docs/grafana against the /metrics of a running
// serve: every series they use is there, with the labels they match on.
// The rule file is checked for Prometheus' rule format with a strict YAML
// decode of its structure, its durations, label names and annotation
// templates; PromQL itself is not parsed, which would take Prometheus'
// own module.
func TestDocs_DashboardAndAlerts_MetricsExist(t *testing.T) {
	t.Parallel()
	srv := serveInProcess(t, t.TempDir())
	// Labelled series appear once they have a value.
	schedule(t, srv.URL(), "docs.metrics", "x", "--delay", "1h")
	series := exposed(t, srv.httpURL())
	// A node of a cluster has the cluster's series too: one of one node.
	clusterAddr := freeAddr(t)
	node := serveInProcess(t, t.TempDir(), "--cluster-listen", clusterAddr, "--cluster-peers", clusterAddr, "--node-id", "docs")
	// NB: the per-member series are the leader's: scraped before the node
	// leads, they are missing, and so would their panels be unchecked.
	node.waitLine(t, `msg="leader ready"`, 30*time.Second)
	maps.Copy(series, exposed(t, node.httpURL()))
	for _, family := range []string{"natsdelay_cluster_peer_applied_index", "natsdelay_cluster_peer_lag_entries", "natsdelay_cluster_peer_answered"} {
		if series[family] == nil {
			t.Fatalf("the leader's /metrics has no %s", family)
		}
	}

	b, err := os.ReadFile("../../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("docs/alerts.yml is not a Prometheus rule file: %v", err)
	}
	if len(rf.Groups) == 0 {
		t.Fatal("docs/alerts.yml has no groups")
	}
	groups, alerts := map[string]bool{}, 0
	var alertExprs, panelExprs []string
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q: empty or given twice", g.Name)
		}
		groups[g.Name] = true
		for _, d := range []string{g.Interval} {
			if _, err := model.ParseDuration(d); d != "" && err != nil {
				t.Errorf("group %s: interval %q: %v", g.Name, d, err)
			}
		}
		for i, r := range g.Rules {
			where := "docs/alerts.yml " + g.Name + "/" + r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("%s (rule %d): want one of alert and record", where, i)
			}
			if r.Alert != "" {
				alerts++
			}
			if r.Record != "" && !model.LegacyValidation.IsValidMetricName(r.Record) {
				t.Errorf("%s: record %q is not a metric name", where, r.Record)
			}
			if r.Record != "" && (r.For != "" || len(r.Annotations) > 0) {
				t.Errorf("%s: a recording rule takes no for or annotations", where)
			}
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if _, err := model.ParseDuration(d); d != "" && err != nil {
					t.Errorf("%s: duration %q: %v", where, d, err)
				}
			}
			for k := range r.Labels {
				if !model.LegacyValidation.IsValidLabelName(k) {
					t.Errorf("%s: label name %q", where, k)
				}
			}
			for k, v := range r.Annotations {
				// As Prometheus expands them: with $labels and $value defined.
				if _, err := template.New(k).Parse("{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + v); err != nil {
					t.Errorf("%s: annotation %s: %v", where, k, err)
				}
			}
			checkExpr(t, where, r.Expr, series)
			if r.Alert != "" {
				alertExprs = append(alertExprs, r.Expr)
			}
		}
	}
	if alerts == 0 {
		t.Error("docs/alerts.yml has no alerts")
	}

	dashboards, err := filepath.Glob("../../docs/grafana/*.json")
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboards in docs/grafana: %v", err)
	}
	for _, path := range dashboards {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string `json:"uid"`
			Title  string `json:"title"`
			Panels []struct {
				ID      int    `json:"id"`
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
			t.Errorf("%s: want a uid, a title and panels", path)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d given twice", path, p.ID)
			}
			ids[p.ID] = true
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no queries", path, p.Title)
			}
			for _, q := range p.Targets {
				checkExpr(t, filepath.Base(path)+" "+p.Title, q.Expr, series)
				panelExprs = append(panelExprs, q.Expr)
			}
		}
	}
	checkCoverage(t, series, alertExprs, panelExprs)
}

// checkCoverage checks that the dashboards chart every natsdelay metric
// family serve exposes, a cluster node's included, and that docs/alerts.yml
// has the alerts docs/operations.md and docs/cluster.md recommend: on bad
// answers, streams that refuse deliveries, events dropped, a cluster
// without exactly one leader, leadership that changes hands too often,
// and a member that does not answer.
func checkCoverage(t *testing.T, series map[string]map[string]bool, alertExprs, panelExprs []string) {
	t.Helper()
	panels := strings.Join(panelExprs, "\n")
	missing := map[string]bool{}
	for name := range series {
		if !strings.HasPrefix(name, "natsdelay_") {
			continue
		}
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			family = strings.TrimSuffix(family, suffix)
		}
		if !regexp.MustCompile(`\b` + family + `(_bucket|_sum|_count)?\b`).MatchString(panels) {
			missing[family] = true
		}
	}
	for _, family := range slices.Sorted(maps.Keys(missing)) {
		t.Errorf("docs/grafana: no panel charts %s", family)
	}
	alerts := strings.Join(alertExprs, "\n")
	for _, want := range []string{"natsdelay_bad_answers_total", "natsdelay_jetstream_errors_total", "natsdelay_events_dropped_total",
		`natsdelay_cluster_role{role="leader"}`, "natsdelay_cluster_leadership_changes_total", "natsdelay_cluster_peer_answered"} {
		if !strings.Contains(alerts, want) {
			t.Errorf("docs/alerts.yml: no alert on %s", want)
		}
	}
}

// handedOut are the addresses freeAddr has returned in this process.
var handedOut struct {
	sync.Mutex
	addrs map[string]bool
}

// freeAddr is a 127.0.0.1 address with a port that was free a moment ago,
// and that no other test of this process was given: the kernel may hand
// a port closed a moment ago to the next listener on port 0, and two
// clusters started in parallel once got the same one.
func freeAddr(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.addrs == nil {
		handedOut.addrs = map[string]bool{}
	}
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr
		}
	}
}
