// Package fleet runs a cell of a fleet: several natsdelay cells (each a
// node or a Raft cluster) on one NATS, each owning some of the fleet's P
// partitions. A subject belongs to partition xxhash64(subject) mod P, the
// first 8 bytes of every key and tag, so a subject, a tag and a (subject,
// id) name their partition with no lookup.
//
// # Subjects
//
// A cell's own service (package bridge) serves on subjects of its own:
//
//	$DELAY.CELL.<cell>.IN.<subject>    ingest, taken only from this package
//	$DELAY.CELL.<cell>.ACK.<tag>       the reply subject of its deliveries
//	$DELAY.CELL.<cell>.API.<VERB>      its API
//
// and a Node of this package, on the node that serves the cell, takes the
// fleet's subjects and routes them:
//
//	delay.>                            ingest, in the fleet's queue group
//	$DELAY.CELL.<cell>.FWD.<from>.<subject>  ingest forwarded to this cell
//	$DELAY.API.<VERB>, $DELAY.ACK      the fleet's API and header ACKs
//	$DELAY.FLEET.ALIVE                 each serving cell's record, each heartbeat
//	$DELAY.FLEET.CELLS                 answered by each serving cell: its status
//	$DELAY.FLEET.STALE.<from>          tells a router its map is stale
//	$DELAY.CELL.<cell>.MOVE.OUT        asks the cell to move partitions away
//	$DELAY.CELL.<cell>.MOVE.<step>     the steps of a move between two cells
//
// A publish to delay.<subject> is taken by one node of the fleet. If its
// cell owns the subject's partition it hands it to its service in process;
// otherwise it publishes it once to the owner's FWD subject with the
// publisher's reply subject, so the owner answers the publisher directly.
// The owner checks that it owns the partition; if the sender's map was
// stale, it tells the sender on its STALE subject, with its own epoch,
// and forwards the message on to the owner it knows.
//
// # The ownership map
//
// Each cell keeps the partitions it owns, and the epoch at which it got
// them, in a record in its data dir (see Record). The fleet's map is the
// union of the records every serving cell publishes on each heartbeat;
// where two records claim a partition the higher epoch wins. A cell not
// heard for Config.Silence is unavailable: its partitions' ingest and
// requests get a 503 from every router, which publishers retry.
//
// # Moves
//
// A single-node cell moves partitions it owns to another on request: it
// freezes them, copies their messages to the target under the same keys,
// has the target own them at a higher epoch, then drops its copies, each
// step written to its record first so that either cell, killed at any
// step, goes on from it (see move.go).
package fleet
