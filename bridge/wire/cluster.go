package wire

// Roles of a node of a cluster, in NodeStatus.Role.
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
	RoleShutdown  = "shutdown"
)

// NodeStatus is one node's own view of its cluster: the body of its reply
// to CLUSTER.STATUS.
type NodeStatus struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Role is leader, follower, candidate or shutdown.
	Role       string `json:"role"`
	LeaderID   string `json:"leader_id"`
	LeaderAddr string `json:"leader_addr"`
	Term       uint64 `json:"term"`
	// LastLogIndex is the last entry in this node's log; CommitIndex the
	// last it knows committed by a quorum; AppliedIndex the last applied
	// to its store.
	LastLogIndex      uint64 `json:"last_log_index"`
	CommitIndex       uint64 `json:"commit_index"`
	AppliedIndex      uint64 `json:"applied_index"`
	LastSnapshotIndex uint64 `json:"last_snapshot_index"`
	// Peers is the configuration this node knows: every member.
	Peers []ClusterPeer `json:"peers"`
	// Err says why the node stopped, when it could not apply the log;
	// empty otherwise.
	Err string `json:"err,omitempty"`
	// LagEntries and LagSeconds are, on a node that does not lead, how
	// far its store is behind the leader: the leader's commit index it
	// last heard minus its applied index, and how long an entry the
	// leader committed has waited unapplied. Behind says why it is too
	// far behind to be ready; empty when it is not.
	LagEntries uint64  `json:"lag_entries"`
	LagSeconds float64 `json:"lag_seconds"`
	Behind     string  `json:"behind,omitempty"`
	// HTTP is the base URL of the node's HTTP listener (its console
	// under /ui/), http://host:port, when it has one; so that the
	// console of one node can link to another's.
	HTTP string `json:"http,omitempty"`
}

// ClusterPeer is one member of a cluster's configuration.
type ClusterPeer struct {
	ID    string `json:"id"`
	Addr  string `json:"addr"`
	Voter bool   `json:"voter"`
}

// ClusterInfo is the cluster object of INFO, answered by the leader.
type ClusterInfo struct {
	// ID and Role are those of the node that answered: the leader's.
	ID          string `json:"id"`
	Role        string `json:"role"`
	LeaderID    string `json:"leader_id"`
	Term        uint64 `json:"term"`
	CommitIndex uint64 `json:"commit_index"`
	// AppliedIndex is the answering node's.
	AppliedIndex uint64 `json:"applied_index"`
	// Peers are the members, each with what it answered to a
	// CLUSTER.STATUS asked while INFO was answered.
	Peers []PeerInfo `json:"peers"`
}

// PeerInfo is one member in INFO's cluster object.
type PeerInfo struct {
	ID    string `json:"id"`
	Addr  string `json:"addr"`
	Voter bool   `json:"voter"`
	// Answered is false when the member did not answer CLUSTER.STATUS in
	// time (down, partitioned, or its NATS connection lost); Role,
	// AppliedIndex and Lag are then unknown and left out.
	Answered     bool   `json:"answered"`
	Role         string `json:"role,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	// Lag is the leader's commit index minus the member's applied index:
	// the entries it has still to apply. Nil when unknown.
	Lag *uint64 `json:"lag,omitempty"`
	// HTTP is the member's NodeStatus.HTTP, when it answered one.
	HTTP string `json:"http,omitempty"`
}

// ClusterAddRequest is the body of CLUSTER.ADD: the new member's node id
// and its cluster address (its --cluster-listen, or --cluster-advertise).
type ClusterAddRequest struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// ClusterRemoveRequest is the body of CLUSTER.REMOVE: the member's id.
type ClusterRemoveRequest struct {
	ID string `json:"id"`
}

// ClusterChangeReply is the reply to CLUSTER.ADD and CLUSTER.REMOVE: the
// configuration once the change is committed.
type ClusterChangeReply struct {
	Peers []ClusterPeer `json:"peers"`
}
