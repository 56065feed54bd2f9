package dist

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// helm is the Helm CLI at the version the Makefile pins, run through the
// module proxy as make package runs it.
const helm = "helm.sh/helm/v4/cmd/helm@v4.3.2"

// object is one rendered manifest.
type object map[string]any

// checkChart lints the chart and renders it as one node, and as a
// three-node cluster with TLS, the console and a ServiceMonitor, and
// checks what the manifests must say: the replicas, the peers by their
// stable names, the TLS flags and the Secret they read, the probes, the
// data volume. Every flag the chart gives is one that bin's serve knows.
func checkChart(t *testing.T, root, dist, bin string) {
	chart := filepath.Join(root, "docs", "helm", "natsdelay")
	runIn(t, root, "go", "run", helm, "lint", "--strict", chart)
	runIn(t, root, "go", "run", helm, "lint", "--strict", chart, "--set", "replicas=3,cluster.tls.secretName=tls")
	serveHelp := runIn(t, root, bin, "serve", "--help")

	one := render(t, root, chart)
	ss := one.find(t, "StatefulSet", "dq-natsdelay")
	c := container(t, ss)
	checkProbes(t, c)
	checkDataVolume(t, ss, c)
	checkFlags(t, c, serveHelp)
	if n := dig(ss, "spec", "replicas"); n != 1 {
		t.Errorf("one node: replicas %v, want 1", n)
	}
	if args := argList(c); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cluster") }) || !slices.Contains(args, "--ui=false") {
		t.Errorf("one node: args %q, want no cluster flags and the console off", args)
	}
	one.find(t, "PodDisruptionBudget", "dq-natsdelay")
	if one.has("ServiceMonitor") {
		t.Errorf("one node: a ServiceMonitor, which is off by default")
	}

	three := render(t, root, chart, "--set", "replicas=3,cluster.tls.secretName=dq-tls,console.enabled=true,"+
		"console.auth.secretName=dq-ui,serviceMonitor.enabled=true")
	checkCluster(t, three, serveHelp)

	// A cluster on a network needs TLS unless told otherwise.
	out, err := helmErr(root, "template", "dq", chart, "--namespace", "jobs", "--set", "replicas=3")
	if err == nil || !strings.Contains(out, "cluster.tls.secretName") {
		t.Errorf("helm template of 3 replicas without TLS: %v, %s; want a failure that names cluster.tls.secretName", err, out)
	}
}

// checkCluster checks the three-node rendering.
func checkCluster(t *testing.T, objs manifests, serveHelp string) {
	ss := objs.find(t, "StatefulSet", "dq-natsdelay")
	c := container(t, ss)
	checkProbes(t, c)
	checkDataVolume(t, ss, c)
	checkFlags(t, c, serveHelp)
	if n := dig(ss, "spec", "replicas"); n != 3 {
		t.Errorf("cluster: replicas %v, want 3", n)
	}
	if p := dig(ss, "spec", "podManagementPolicy"); p != "Parallel" {
		t.Errorf("cluster: podManagementPolicy %v, want Parallel: a fresh cluster forms only once every peer answers", p)
	}
	host := "dq-natsdelay-%d.dq-natsdelay-headless.jobs.svc"
	peers := fmt.Sprintf(host+":7000,"+host+":7000,"+host+":7000", 0, 1, 2)
	routes := fmt.Sprintf("nats://"+host+":6222,nats://"+host+":6222,nats://"+host+":6222", 0, 1, 2)
	args := argList(c)
	for _, want := range []string{
		"--node-id=$(POD_NAME)", "--cluster-listen=0.0.0.0:7000",
		"--cluster-advertise=$(POD_NAME).dq-natsdelay-headless.jobs.svc:7000",
		"--cluster-peers=" + peers, "--nats-routes=" + routes,
		"--cluster-tls-cert=/etc/natsdelay/cluster-tls/tls.crt",
		"--cluster-tls-key=/etc/natsdelay/cluster-tls/tls.key",
		"--cluster-tls-ca=/etc/natsdelay/cluster-tls/ca.crt",
		"--ui", "--ui-auth=/etc/natsdelay/ui-auth/passwords",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("cluster: args %q lack %s", args, want)
		}
	}
	if slices.Contains(args, "--cluster-insecure") {
		t.Errorf("cluster with TLS: args %q say --cluster-insecure", args)
	}
	checkSecretMount(t, ss, c, "dq-tls", "/etc/natsdelay/cluster-tls")
	checkSecretMount(t, ss, c, "dq-ui", "/etc/natsdelay/ui-auth")

	headless := objs.find(t, "Service", "dq-natsdelay-headless")
	if dig(headless, "spec", "clusterIP") != "None" || dig(headless, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("headless Service: spec %v, want clusterIP None and the pods not ready published", headless["spec"])
	}
	sm := objs.find(t, "ServiceMonitor", "dq-natsdelay")
	ep, _ := dig(sm, "spec", "endpoints").([]any)
	if len(ep) != 1 || dig(ep[0], "port") != "http" || dig(ep[0], "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v, want the http port's /metrics", ep)
	}
	pdb := objs.find(t, "PodDisruptionBudget", "dq-natsdelay")
	if dig(pdb, "spec", "maxUnavailable") != 1 {
		t.Errorf("PodDisruptionBudget spec %v, want maxUnavailable 1: a quorum of three stays", pdb["spec"])
	}
}

// checkProbes wants startup and liveness on /healthz, which answers while
// the store opens and the log replays, and readiness on /readyz; the
// startup probe waits minutes for the listener.
func checkProbes(t *testing.T, c any) {
	for probe, path := range map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := dig(c, probe, "httpGet", "path"); got != path || dig(c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v, want GET %s on the http port", probe, dig(c, probe), path)
		}
	}
	period, _ := dig(c, "startupProbe", "periodSeconds").(int)
	failures, _ := dig(c, "startupProbe", "failureThreshold").(int)
	if period*failures < 120 {
		t.Errorf("startupProbe: %ds × %d, want at least 2 minutes", period, failures)
	}
}

// checkDataVolume wants the claim template data mounted where --data-dir
// points.
func checkDataVolume(t *testing.T, ss object, c any) {
	claims, _ := dig(ss, "spec", "volumeClaimTemplates").([]any)
	if len(claims) != 1 || dig(claims[0], "metadata", "name") != "data" {
		t.Errorf("volumeClaimTemplates %v, want one named data", claims)
	}
	if mountOf(c, "data") != "/data" || !slices.Contains(argList(c), "--data-dir=/data") {
		t.Errorf("the data volume is mounted at %q with args %q; want /data and --data-dir=/data", mountOf(c, "data"), argList(c))
	}
}

// checkSecretMount wants a volume of the Secret mounted at path.
func checkSecretMount(t *testing.T, ss object, c any, secret, path string) {
	vols, _ := dig(ss, "spec", "template", "spec", "volumes").([]any)
	for _, v := range vols {
		if dig(v, "secret", "secretName") == secret {
			if got := mountOf(c, dig(v, "name").(string)); got != path {
				t.Errorf("Secret %s mounted at %q, want %s", secret, got, path)
			}
			return
		}
	}
	t.Errorf("no volume of the Secret %s in %v", secret, vols)
}

// checkFlags wants every flag the container is given to be one of serve's.
func checkFlags(t *testing.T, c any, serveHelp string) {
	for _, a := range argList(c)[1:] {
		name, _, _ := strings.Cut(a, "=")
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(name) + `[=\s]|--\[no-\]` + regexp.QuoteMeta(strings.TrimPrefix(name, "--")) + `\b`).MatchString(serveHelp) {
			t.Errorf("the chart gives %s, which natsdelay serve does not know", name)
		}
	}
	if args := argList(c); len(args) == 0 || args[0] != "serve" {
		t.Errorf("args %q, want serve first", args)
	}
}

// manifests is what helm template rendered.
type manifests []object

func render(t *testing.T, root, chart string, args ...string) manifests {
	out := runIn(t, root, "go", append([]string{"run", helm, "template", "dq", chart, "--namespace", "jobs"}, args...)...)
	var objs manifests
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("helm template printed YAML that does not parse: %v\n%s", err, out)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

func helmErr(root string, args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"run", helm}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (m manifests) find(t *testing.T, kind, name string) object {
	t.Helper()
	for _, o := range m {
		if o["kind"] == kind && dig(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("helm template rendered no %s %s", kind, name)
	return nil
}

func (m manifests) has(kind string) bool {
	return slices.ContainsFunc(m, func(o object) bool { return o["kind"] == kind })
}

// dig follows keys through nested maps; nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		switch m := v.(type) {
		case object:
			v = m[k]
		case map[string]any:
			v = m[k]
		default:
			return nil
		}
	}
	return v
}

func container(t *testing.T, ss object) any {
	cs, _ := dig(ss, "spec", "template", "spec", "containers").([]any)
	if len(cs) != 1 {
		t.Fatalf("StatefulSet containers %v, want one", cs)
	}
	return cs[0]
}

func argList(c any) []string {
	raw, _ := dig(c, "args").([]any)
	var out []string
	for _, a := range raw {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

func mountOf(c any, volume string) string {
	mounts, _ := dig(c, "volumeMounts").([]any)
	for _, m := range mounts {
		if dig(m, "name") == volume {
			p, _ := dig(m, "mountPath").(string)
			return p
		}
	}
	return ""
}
