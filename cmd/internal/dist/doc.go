// Package dist holds how natsdelay is released: the systemd unit, the
// default config and the maintainer scripts of the .deb and .rpm
// (nfpm.yaml), and the Containerfile of the image. make package builds
// them; this package's test runs make package for linux/amd64 and checks
// what it made: the static binary and its version, SHA256SUMS, the .deb
// installed with dpkg and served from, the unit through systemd-analyze,
// the image's config and the binary inside it, and the Helm chart of
// docs/helm/natsdelay through helm lint and helm template.
package dist
