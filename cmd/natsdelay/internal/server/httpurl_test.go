package server

import "testing"

// A node tells others its HTTP listener at an address they can reach: the
// listener's own host, or on a listener of every address, the host of the
// node's cluster address; nothing when the listener is off.
func TestHTTPURL_ReachableHost(t *testing.T) {
	for _, tc := range []struct{ addr, cluster, want string }{
		{"127.0.0.1:7070", "10.0.0.5:7000", "http://127.0.0.1:7070"},
		{"0.0.0.0:7070", "10.0.0.5:7000", "http://10.0.0.5:7070"},
		{"[::]:7070", "node-a.natsdelay:7000", "http://node-a.natsdelay:7070"},
		{":7070", "[fd00::5]:7000", "http://[fd00::5]:7070"},
		{"off", "10.0.0.5:7000", ""},
	} {
		if got := httpURL(tc.addr, tc.cluster); got != tc.want {
			t.Errorf("httpURL(%q, %q) = %q, want %q", tc.addr, tc.cluster, got, tc.want)
		}
	}
}
