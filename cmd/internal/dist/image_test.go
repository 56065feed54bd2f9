package dist

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ociArchive is an OCI image layout read from a tar: its files by name.
type ociArchive map[string][]byte

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

// imageConfig is the part of an OCI image config the test checks.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User         string              `json:"User"`
		Env          []string            `json:"Env"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Volumes      map[string]struct{} `json:"Volumes"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
}

// checkImage reads the image make package saved as an OCI archive, checks
// its config (entrypoint, a nonroot numeric user, the data volume, the
// ports, the OCI labels) and its files (the binary, the volume's mount
// point owned by that user), then runs the binary it holds as the image
// would: version, and serve with the image's env, which answers a publish.
func checkImage(t *testing.T, archive, revision string) {
	oci := readArchive(t, archive)
	var index struct{ Manifests []descriptor }
	oci.decode(t, "index.json", &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(index.Manifests))
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	oci.decode(t, blobPath(index.Manifests[0]), &manifest)
	var cfg imageConfig
	oci.decode(t, blobPath(manifest.Config), &cfg)
	checkImageConfig(t, cfg, revision)

	dir := t.TempDir()
	bin := filepath.Join(dir, "natsdelay")
	for _, l := range manifest.Layers {
		oci.extractLayer(t, l, bin)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the image holds no /natsdelay: %v", err)
	}
	checkVersion(t, bin)
	// The image's entrypoint and command, with the image's env, and only
	// the data dir and ports the test's own.
	args := append(slices.Clone(cfg.Config.Cmd), "--data-dir", filepath.Join(dir, "data"),
		"--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	serve := exec.Command(bin, args...)
	serve.Env = cfg.Config.Env
	serveAndPublish(t, serve)
}

func checkImageConfig(t *testing.T, cfg imageConfig, revision string) {
	c := cfg.Config
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("image for %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if !slices.Equal(c.Entrypoint, []string{"/natsdelay"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q, command %q; want [/natsdelay] and [serve]", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want the numeric nonroot 65532:65532", c.User)
	}
	if _, ok := c.Volumes["/data"]; !ok || !slices.Contains(c.Env, "NATSDELAY_DATA_DIR=/data") {
		t.Errorf("volumes %v, env %q: want the data dir /data a volume", c.Volumes, c.Env)
	}
	for _, p := range []string{"4222/tcp", "7070/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("exposed ports %v: no %s", c.ExposedPorts, p)
		}
	}
	want := map[string]string{
		"org.opencontainers.image.title":    "natsdelay",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/natsdelay/natsdelay",
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if _, err := time.Parse(time.RFC3339, c.Labels["org.opencontainers.image.created"]); err != nil {
		t.Errorf("label org.opencontainers.image.created: %v", err)
	}
}

func readArchive(t *testing.T, path string) ociArchive {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := ociArchive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(h.Name, "./")] = b
	}
}

func blobPath(d descriptor) string {
	return "blobs/" + strings.Replace(d.Digest, ":", "/", 1)
}

func (o ociArchive) decode(t *testing.T, name string, v any) {
	t.Helper()
	b, ok := o[name]
	if !ok {
		t.Fatalf("the image archive has no %s", name)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// extractLayer writes the layer's /natsdelay to bin, and checks that
// /data, when the layer has it, is the nonroot user's.
func (o ociArchive) extractLayer(t *testing.T, l descriptor, bin string) {
	var r io.Reader = bytes.NewReader(o[blobPath(l)])
	if strings.HasSuffix(l.MediaType, "+gzip") {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("layer %s: %v", l.Digest, err)
		}
		switch strings.TrimSuffix(strings.TrimPrefix(h.Name, "/"), "/") {
		case "natsdelay":
			if h.Mode&0o111 == 0 {
				t.Errorf("/natsdelay in the image has mode %o: not executable", h.Mode)
			}
			writeFile(t, bin, tr, 0o755)
		case "data":
			if h.Typeflag != tar.TypeDir || h.Uid != 65532 || h.Gid != 65532 {
				t.Errorf("/data in the image: type %c owner %d:%d, want a directory of 65532:65532", h.Typeflag, h.Uid, h.Gid)
			}
		}
	}
}
