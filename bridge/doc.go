// Package bridge is natsdelay's NATS adapter: everything that speaks NATS
// for the running service. Its core (package bridge/internal/core) runs the store
// and what works on it, with no NATS at all; bridge connects that core to
// the wire.
//
// # What it owns
//
//   - the micro service (natsdelay) with its endpoints: ingest on
//     <ingest prefix>.>, and the API on <api prefix>.INFO, GET, LIST,
//     CANCEL, SUBJECTS and SCHEDULES;
//   - the two ack subscriptions, on <ack prefix>.> and <ack prefix>;
//   - the publisher, which adapts the connection to dispatch.Publisher
//     and sends deliveries, dead letters and its flush markers;
//   - the Prometheus metrics, and the rate-limited warnings about invalid
//     publishes and bad answers;
//   - with Config.Events, the publisher of lifecycle events (package
//     bridge/events), told by ingest and, through dispatch's Lifecycle
//     hook, by the dispatcher; Events hands it to code that makes other
//     things happen to messages;
//   - the core, which it opens in New and closes in Close;
//   - on a node of a cluster, what is subscribed while it leads, and its
//     answers to CLUSTER.STATUS.
//
// The vocabulary of the protocol (subjects, header names, reply and error
// bodies) is in package bridge/wire, which clients share.
//
// # Traffic on each subscription
//
// The ingest endpoint takes messages to schedule; each is parsed and
// handed to the core's group commit, and answered once it is stored. The
// API endpoints take requests and answer them from the core.
//
// The subscription on <ack prefix>.> carries three kinds of traffic, which
// must share it: NATS orders messages within one subscription, and a flush
// marker is known to come after every no-responders notice sent before it.
//
//   - flush markers, on <ack prefix>.<marker>: the publisher's own, to
//     learn that the server processed what it sent before (see
//     publisher.Flush);
//   - no-responders notices, a Status: 503 with no payload and no reply:
//     the server's word that a delivery reached nobody (handleNoResponders);
//   - answers to deliveries (+ACK, -NAK, +WPI, +TERM), with the tag in the
//     subject (handleAnswer).
//
// The subscription on <ack prefix> itself carries answers with the tag in
// the Delay-Tag header (handleAckHeader, then handleAnswer).
//
// # Shutdown order
//
// Close first stops the micro service, which drains the ingest and API
// endpoints, so every request taken is answered. It then stops the core:
// the group commit commits and answers what it holds, the janitor stops,
// and the dispatcher finishes its publishes and flushes its pending
// deletes. Only then do the ack subscriptions drain, because the
// dispatcher needs them for flush markers and no-responders notices until
// it has stopped. Last, the core closes the store. The Service does not
// close its NATS connection; the caller does, after Close.
//
// # A node of a cluster
//
// Given WithCluster, the Service is one node of a cluster whose
// store is replicated (package delaystore/raftstore, adapted by
// RaftCluster). Only the leader serves: the core opens suspended, and the
// Cluster's leadership watch starts and stops serving (onLeadership). On
// becoming leader the node subscribes to the acks, resumes the core (a
// fresh generation on the replicated store, which holds everything
// committed before: the Cluster calls back only after a barrier), waits
// until it takes work, and registers the micro service; if it cannot (a
// subscription fails), it undoes that and hands the leadership over
// (Cluster.StepDown), so that a leader never delivers while it answers
// nothing. On losing
// leadership it stops the micro service (its endpoints drain), suspends
// the core (the writer answers what it took, with a 503 when the write can
// no longer be committed; the dispatcher and janitor stop), and drains the
// acks, in the order of Close. NATS interest routing takes publishers to
// the leader; while there is none, they get no responders.
//
// Every node, the followers too, answers CLUSTER.STATUS with its own view,
// on a plain subscription (not a queue group), so that a requester
// gathering replies hears them all; INFO's cluster object, answered by the
// leader, is built that way. The leader also serves CLUSTER.ADD and
// CLUSTER.REMOVE.
//
// # Goroutines
//
// bridge starts no goroutines of its own: its handlers run on the
// goroutines of nats.go's subscriptions, which Close drains, and the
// leadership changes of a node on the Cluster's watch, which Close cancels
// first. The core owns
// the recovery loop and each generation's writer, dispatcher and janitor
// (see package bridge/internal/core).
package bridge
