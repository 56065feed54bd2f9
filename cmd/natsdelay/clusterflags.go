package main

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/natsdelay/natsdelay/cmd/internal/usage"
	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// clusterFlags are serve's flags for running as a node of a cluster, and
// for letting its embedded nats-server route to the others' servers.
type clusterFlags struct {
	ClusterListen    string        `name:"cluster-listen" help:"Run as a node of a cluster: the address of this node's Raft transport, bound and, unless --cluster-advertise says otherwise, the address the others reach it at." placeholder:"HOST:PORT" group:"Cluster"`
	ClusterAdvertise string        `name:"cluster-advertise" help:"The address the other nodes reach this one at, when --cluster-listen binds another (0.0.0.0:7000, say)." placeholder:"HOST:PORT" group:"Cluster"`
	ClusterPeers     []string      `name:"cluster-peers" help:"Every member's cluster address, this node's own included; a fresh cluster starts once all answer." placeholder:"HOST:PORT" group:"Cluster"`
	ClusterJoin      bool          `name:"cluster-join" help:"Join the cluster the peers already form instead of bootstrapping one: for a new node with an empty data dir, added with natsdelay cluster add." group:"Cluster"`
	ClusterTimeout   time.Duration `name:"cluster-timeout" help:"How long a follower goes without hearing from the leader before it calls an election; a leader that hears from no quorum for half of it steps down. A failover takes about one to two of it." default:"1s" group:"Cluster"`
	NodeID           string        `name:"node-id" help:"This node's id, unique in the cluster and never reused for another data dir." placeholder:"NAME" group:"Cluster"`

	ClusterTLSCert  string `name:"cluster-tls-cert" help:"This node's certificate (PEM) for mutual TLS on the cluster port; with --cluster-tls-key and --cluster-tls-ca. natsdelay cluster certs makes a set for a test cluster." type:"path" placeholder:"FILE" group:"Cluster"`
	ClusterTLSKey   string `name:"cluster-tls-key" help:"The private key (PEM) of --cluster-tls-cert." type:"path" placeholder:"FILE" group:"Cluster"`
	ClusterTLSCA    string `name:"cluster-tls-ca" help:"The cluster's CA certificate (PEM): peers are accepted only with a certificate it signed." type:"path" placeholder:"FILE" group:"Cluster"`
	ClusterInsecure bool   `name:"cluster-insecure" help:"Let a node whose cluster address is not a loopback address run without TLS: whoever reaches the port can then replace the data." group:"Cluster"`

	NATSClusterListen string   `name:"nats-cluster-listen" help:"Let the embedded nats-server take routes from other servers on this address, making one NATS cluster with them." placeholder:"HOST:PORT" group:"Cluster"`
	NATSRoutes        []string `name:"nats-routes" help:"The route URLs of the other embedded nats-servers, such as nats://b:6222,nats://c:6222." placeholder:"URL" group:"Cluster"`
	NATSClusterName   string   `name:"nats-cluster-name" help:"The NATS cluster name the embedded nats-servers share." default:"natsdelay" group:"Cluster"`
}

// clustered reports whether serve runs as a node of a cluster.
func (c *clusterFlags) clustered() bool {
	return c.ClusterListen != "" || len(c.ClusterPeers) > 0 || c.NodeID != "" || c.ClusterAdvertise != "" || c.ClusterJoin
}

// advertised is the address the other nodes reach this one at.
func (c *clusterFlags) advertised() string {
	if c.ClusterAdvertise != "" {
		return c.ClusterAdvertise
	}
	return c.ClusterListen
}

// nodeIDPattern is what a node id may be: it names the node in logs,
// metrics labels and the cluster's configuration.
var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// checkCluster adds a problem to p for each bad cluster setting, naming
// the flag and its value. engine is --engine, embedded whether serve runs
// its own nats-server.
func (c *clusterFlags) checkCluster(p *problems, engine string, embedded bool) {
	if c.NATSClusterListen != "" || len(c.NATSRoutes) > 0 {
		if !embedded {
			p.add("--nats-cluster-listen and --nats-routes only apply to the embedded nats-server; with --nats, make the NATS cluster with the servers' own configuration")
		}
		if c.NATSClusterListen == "" {
			p.add("--nats-routes %s: needs --nats-cluster-listen, the address the embedded nats-server takes routes on", strings.Join(c.NATSRoutes, ","))
		} else {
			checkHostPort(p, "--nats-cluster-listen", c.NATSClusterListen, true)
		}
		for _, r := range c.NATSRoutes {
			if u, err := url.Parse(r); err != nil || (u.Scheme != "nats" && u.Scheme != "nats-route") || u.Port() == "" {
				p.add("--nats-routes %q: want a route URL such as nats://10.0.0.2:6222", r)
			}
		}
	}
	if !c.clustered() {
		return
	}
	if engine == "memory" {
		p.add("--engine memory: a node of a cluster needs a store on disk (pebble or bolt): the Raft log on disk is only replayed into a store that survives restarts as it does")
	}
	if c.ClusterListen == "" {
		p.add(`--cluster-listen "": a node of a cluster needs the address of its Raft transport, such as 10.0.0.1:7000`)
	} else {
		checkHostPort(p, "--cluster-listen", c.ClusterListen, false)
	}
	if c.ClusterAdvertise != "" {
		checkHostPort(p, "--cluster-advertise", c.ClusterAdvertise, false)
		if h, _, err := net.SplitHostPort(c.ClusterAdvertise); err == nil && unspecified(h) {
			p.add("--cluster-advertise %q: the other nodes cannot reach an unspecified address: want this node's address on their network", c.ClusterAdvertise)
		}
	} else if h, _, err := net.SplitHostPort(c.ClusterListen); err == nil && unspecified(h) {
		p.add("--cluster-listen %q binds every interface: give --cluster-advertise, the address the other nodes reach this one at", c.ClusterListen)
	}
	c.checkClusterTLS(p)
	if c.ClusterTimeout < 50*time.Millisecond {
		p.add("--cluster-timeout %v: want at least 50ms: shorter, a busy node misses heartbeats and the cluster keeps electing", c.ClusterTimeout)
	}
	if c.NodeID == "" {
		p.add(`--node-id "": a node of a cluster needs an id, unique in the cluster, such as its host name`)
	} else if !nodeIDPattern.MatchString(c.NodeID) {
		p.add("--node-id %q: want 1 to 64 letters, digits, dots, dashes or underscores, starting with a letter or digit", c.NodeID)
	}
	if len(c.ClusterPeers) == 0 {
		p.add("--cluster-peers: a node of a cluster needs every member's cluster address, its own included, such as a:7000,b:7000,c:7000")
		return
	}
	seen := map[string]bool{}
	self := false
	for _, peer := range c.ClusterPeers {
		checkHostPort(p, "--cluster-peers", peer, false)
		if seen[peer] {
			p.add("--cluster-peers: %q is listed twice", peer)
		}
		seen[peer] = true
		self = self || peer == c.advertised()
	}
	if !self && c.advertised() != "" {
		flag := "--cluster-listen"
		if c.ClusterAdvertise != "" {
			flag = "--cluster-advertise"
		}
		p.add("--cluster-peers %s: does not list this node's own address %s (%s %s): list every member, this one included, as each node lists them", strings.Join(c.ClusterPeers, ","), c.advertised(), flag, c.advertised())
	}
}

// tlsSet reports whether serve's cluster port speaks mutual TLS.
func (c *clusterFlags) tlsSet() bool {
	return c.ClusterTLSCert != "" || c.ClusterTLSKey != "" || c.ClusterTLSCA != ""
}

// checkClusterTLS adds a problem for an incomplete TLS setting, and for a
// cluster reachable from other hosts without TLS, unless --cluster-insecure
// says so: whoever reaches a Raft port can replace the data or keep the
// cluster leaderless.
func (c *clusterFlags) checkClusterTLS(p *problems) {
	if c.tlsSet() {
		if c.ClusterTLSCert == "" || c.ClusterTLSKey == "" || c.ClusterTLSCA == "" {
			p.add("--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca go together: give all three (natsdelay cluster certs makes a set)")
		}
		if c.ClusterInsecure {
			p.add("--cluster-insecure with --cluster-tls-*: choose one")
		}
		return
	}
	if c.ClusterInsecure {
		return
	}
	addrs := append([]string{c.ClusterListen, c.ClusterAdvertise}, c.ClusterPeers...)
	for _, a := range addrs {
		if a == "" || loopback(a) {
			continue
		}
		p.add("cluster address %s is not a loopback address: anyone who reaches a cluster port can replace the data, so a cluster on a network needs "+
			"mutual TLS (--cluster-tls-cert, --cluster-tls-key, --cluster-tls-ca; natsdelay cluster certs makes a set), or --cluster-insecure on a network nobody else reaches", a)
		return
	}
}

// loopback reports whether the host of addr is a loopback address or
// localhost. A listen address that binds every interface is not.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkHostPort adds a problem if v is not host:port with a port from 1
// (or 0, when anyPort) to 65535.
func checkHostPort(p *problems, flag, v string, anyPort bool) {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		p.add("%s %q: want host:port, such as 10.0.0.1:7000: %v", flag, v, err)
		return
	}
	n, err := strconv.Atoi(port)
	low := 1
	if anyPort {
		low = 0
	}
	if err != nil || n < low || n > 65535 {
		p.add("%s %q: port %q: want a number from %d to 65535", flag, v, port, low)
	}
}

func unspecified(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// raftConfig is this node's Raft configuration from the cluster flags;
// the server sets where it keeps its state and what it applies to.
func (c *serveCmd) raftConfig() (raftstore.Config, error) {
	rc := raftstore.DefaultConfig()
	rc.NodeID, rc.Listen, rc.Advertise, rc.Peers = c.NodeID, c.ClusterListen, c.ClusterAdvertise, c.ClusterPeers
	rc.Join = c.ClusterJoin
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = c.ClusterTimeout, c.ClusterTimeout, c.ClusterTimeout/2
	if c.tlsSet() {
		tlsConf, err := raftstore.LoadTLS(c.ClusterTLSCert, c.ClusterTLSKey, c.ClusterTLSCA)
		if err != nil {
			return rc, usage.Wrap(fmt.Errorf("cluster node %s: %w", c.NodeID, err))
		}
		rc.TLS = tlsConf
	}
	return rc, nil
}
