package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Service is what a Node needs of its cell's service (a *bridge.Service).
type Service interface {
	// Ingest schedules a message that arrived as the request req, whose
	// subject is under the service's ingest prefix.
	Ingest(req micro.Request)
	// Leader reports whether the service serves now: always on a single
	// node, only as the leader holding its lease in a cluster.
	Leader() bool
	// Leads reports whether the service holds the serving subscriptions:
	// always on a single node, as the Raft leader in a cluster, whether
	// or not its lease holds this moment (Ingest waits for the lease, and
	// answers 503 if it does not come back).
	Leads() bool
	// Info is the cell's INFO.
	Info() (wire.InfoReply, error)
}

// BatchIngester is a Service that also takes several messages at once
// (a *bridge.Service is one): it parses them all before it hands the
// first to its group commit, so that they are committed together. A
// node hands it what one burst of its ingest and each forwarded batch
// hold for its own cell; with a Service that is not one, each goes to
// Ingest alone.
type BatchIngester interface {
	IngestBatch(reqs []micro.Request)
}

// Node is a node of a cell in the fleet. While its service serves, it
// routes the fleet's ingest, API and header ACKs by partition, takes what
// other nodes forward to its cell, and tells the fleet its record each
// heartbeat. Every node learns the fleet's map from those heartbeats.
type Node struct {
	nc  *nats.Conn
	svc Service
	cfg Config
	// rec is the record the node started with: its Cell and Partitions
	// never change. What does is in cur.
	rec Record
	log *slog.Logger
	// curMu guards cur, the cell's record now, which a move changes.
	curMu sync.Mutex
	cur   Record
	// writeMu serialises the changes of cur (see update).
	writeMu sync.Mutex
	// lastIn is when a chunk of the move into this cell last came (Unix
	// ns; see watchIn).
	lastIn atomic.Int64
	// batcher is svc as a BatchIngester, nil if it takes one message at
	// a time.
	batcher BatchIngester
	// mover is svc as a Mover, nil if it cannot move partitions; moving
	// serialises the moves this cell carries out (see move.go), and
	// moveWG waits for the goroutines that carry them out.
	mover  Mover
	moving sync.Mutex
	// keeper keeps the record of a cluster cell, nil for a single node
	// (see keeper.go).
	keeper Keeper
	moveWG sync.WaitGroup
	// id names this node's router in the subjects it forwards on, so a
	// receiver can tell it that its map is stale.
	id    string
	table *table
	// cellIngest is the cell's service's ingest prefix plus ".".
	cellIngest string

	// always are the subscriptions of every node: the heartbeats, the
	// stale notices and the answers relayed to this router.
	always []*nats.Subscription
	// ingest is every node's subscription to the fleet's ingest, serving
	// or not: a node of a cell that is a cluster routes publishes while
	// its cell has no leader, so that they get a 503 rather than NATS's
	// no-responders. Only the loop's goroutine drains it.
	ingest *nats.Subscription
	// in is where NATS puts what the ingest subscription and the
	// forwards to this cell take, for one goroutine, serveIn, to route
	// or take in arrival order (see serveIn); inStop tells it to finish
	// what is in it and stop, and inDone is closed when it has.
	in             chan *nats.Msg
	inStop, inDone chan struct{}
	inOnce         sync.Once
	// batches reads the forwarded batches serveIn takes; only serveIn
	// uses it.
	batches batchDecoder
	// forwardedTo is the prefix, with its ".", of the forwards to this
	// cell.
	forwardedTo string
	// relay holds the forwarded messages waiting for their answer.
	relay relay
	// out holds what serveIn forwards and takes for this cell until a
	// burst ends; only serveIn touches it.
	out outbox
	// serving holds the subscriptions taken while the service serves;
	// only the loop's goroutine touches it.
	serving []*nats.Subscription
	refresh chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	// stale guards nStale, the stale notices this router was sent, and
	// strangers, the cells of another fleet size already warned about.
	stale     sync.Mutex
	nStale    uint64
	strangers map[string]bool
	// gather guards gathered, when a route last asked every cell for a
	// partition with no owner known (see ownerOf).
	gather   sync.Mutex
	gathered time.Time
}

// New starts the node of cell rec (see Prepare) whose service is svc, on
// nc. Close stops it.
func New(nc *nats.Conn, svc Service, rec Record, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ingest, _, _ := CellSubjects(rec.Cell)
	n := &Node{
		nc: nc, svc: svc, cfg: cfg, rec: rec, log: cfg.Logger.With("component", "fleet", "cell", rec.Cell),
		id: nuid.Next(), table: newTable(rec.Partitions), cellIngest: ingest + ".",
		forwardedTo: forwardPrefix(rec.Cell) + ".", in: make(chan *nats.Msg, inQueue),
		inStop: make(chan struct{}), inDone: make(chan struct{}),
		refresh: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	n.cur = rec
	n.lastIn.Store(time.Now().UnixNano())
	n.mover, _ = svc.(Mover)
	n.batcher, _ = svc.(BatchIngester)
	if cfg.Clustered {
		k, ok := svc.(Keeper)
		if !ok {
			return nil, fmt.Errorf("%w: cell %q is a cluster, and its service cannot keep the cell's record in the replicated store", ErrInvalidConfig, rec.Cell)
		}
		n.keeper = k
	}
	if err := n.freeze(rec); err != nil {
		return nil, err
	}
	n.table.learn(n.status(), time.Now())
	for _, s := range []struct {
		subject string
		h       nats.MsgHandler
	}{{AliveSubject, n.handleAlive}, {StalePrefix + "." + n.id, n.handleStale}, {n.relaySubject() + ".*", n.handleRelay}} {
		sub, err := nc.Subscribe(s.subject, s.h)
		if err == nil {
			err = sub.SetPendingLimits(1<<20, 512<<20)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("fleet: subscribe %s: %w", s.subject, err), n.unsubscribe(n.always))
		}
		n.always = append(n.always, sub)
	}
	if n.keeper != nil {
		// NB: before the loop serves anything of the fleet's: a node
		// that leads already reads the replicated record now.
		if err := n.keeper.OnServe(n.takeOver); err != nil {
			_ = n.keeper.OnServe(nil)
			close(n.stop)
			n.moveWG.Wait()
			return nil, errors.Join(err, n.unsubscribe(n.always))
		}
	}
	// The ingest is taken last, once its answers can be relayed.
	go n.serveIn()
	sub, err := nc.ChanQueueSubscribe(n.cfg.IngestPrefix+".>", QueueGroup, n.in)
	if err != nil {
		if n.keeper != nil {
			_ = n.keeper.OnServe(nil)
		}
		close(n.stop)
		n.stopIn()
		n.moveWG.Wait()
		return nil, errors.Join(fmt.Errorf("fleet: subscribe %s.>: %w", n.cfg.IngestPrefix, err), n.unsubscribe(n.always))
	}
	n.ingest = sub
	go n.loop()
	n.resumeMoves(rec)
	return n, nil
}

// Close stops serving, the heartbeats and the moves under way (each goes
// on where it stopped when the cell starts again), and waits for them.
// The publishers of forwarded messages still unanswered get a 503.
func (n *Node) Close() error {
	if n.keeper != nil {
		_ = n.keeper.OnServe(nil)
	}
	n.once.Do(func() { close(n.stop) })
	<-n.done
	n.stopIn()
	n.moveWG.Wait()
	err := n.unsubscribe(n.always)
	n.expireRelayed(true)
	return err
}

// Record is this cell's record now.
func (n *Node) Record() Record {
	n.curMu.Lock()
	defer n.curMu.Unlock()
	return n.cur
}

// StaleNotices is how many times a receiver told this node's router that
// its map was stale.
func (n *Node) StaleNotices() uint64 {
	n.stale.Lock()
	defer n.stale.Unlock()
	return n.nStale
}

// loop follows the service's leadership each heartbeat: it takes the
// serving subscriptions when the service leads and drops them when it
// stops, and while it leads tells the fleet the cell's record. It
// follows the Raft leadership, not the lease: a lease that lapses for a
// moment on a starved leader took the cell's subscriptions and
// heartbeats away with it, so that the fleet answered its partitions
// with 503s (and, before followers took the ingest, no-responders) while
// no election happened.
func (n *Node) loop() {
	defer close(n.done)
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		n.beat()
		select {
		case <-n.stop:
			if err := n.drain(append(n.serving, n.ingest)); err != nil {
				n.log.Warn("stopping the fleet's subscriptions", "err", err)
			}
			n.serving = nil
			return
		case <-t.C:
			n.expireRelayed(false)
		case <-n.refresh:
			n.learnAll()
		}
	}
}

func (n *Node) beat() {
	switch serving := n.svc.Leads(); {
	case serving && n.serving == nil:
		n.learnAll()
		if err := n.subscribe(); err != nil {
			n.log.Error("subscribing to the fleet's subjects: retrying next heartbeat", "err", err)
			return
		}
		rec := n.Record()
		n.log.Info("cell serving in the fleet", "partitions", FormatRanges(rec.Owned), "epoch", rec.Epoch)
	case !serving && n.serving != nil:
		if err := n.drain(n.serving); err != nil {
			n.log.Warn("stopping the fleet's subscriptions", "err", err)
		}
		n.serving = nil
		n.log.Info("cell not serving: the fleet's routes stop here")
		return
	case !serving:
		return
	}
	b, _ := json.Marshal(n.status())
	_ = n.nc.Publish(AliveSubject, b)
}

// learnAll asks every serving cell for its status, for a heartbeat at
// most, and learns the answers.
func (n *Node) learnAll() {
	for _, st := range GatherCells(n.nc, n.cfg.Heartbeat) {
		n.table.learn(st, time.Now())
	}
}

func (n *Node) status() Status {
	return Status{Record: n.Record(), Node: n.cfg.Node, Clustered: n.cfg.Clustered}
}

func (n *Node) handleAlive(m *nats.Msg) {
	var st Status
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return
	}
	if !n.table.learn(st, time.Now()) && n.firstStranger(st.Cell) {
		n.log.Warn("a cell of another fleet size on this NATS: ignored", "other", st.Cell, "its_partitions", st.Partitions, "ours", n.rec.Partitions)
	}
}

// handleStale learns the record a receiver sent with its notice, and asks
// the loop to learn every cell's again.
func (n *Node) handleStale(m *nats.Msg) {
	n.stale.Lock()
	n.nStale++
	n.stale.Unlock()
	n.handleAlive(m)
	select {
	case n.refresh <- struct{}{}:
	default:
	}
}

// firstStranger reports whether cell, of another fleet, is heard for the
// first time, so that it is warned about once, not every heartbeat.
func (n *Node) firstStranger(cell string) bool {
	n.stale.Lock()
	defer n.stale.Unlock()
	if n.strangers[cell] {
		return false
	}
	if n.strangers == nil {
		n.strangers = map[string]bool{}
	}
	n.strangers[cell] = true
	return true
}

func (n *Node) unsubscribe(subs []*nats.Subscription) error {
	var errs []error
	for _, s := range subs {
		if err := s.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drain stops the serving subscriptions so that what each took is still
// handed over: all drain at once, and each is waited for, 10s at most.
func (n *Node) drain(subs []*nats.Subscription) error {
	if !n.nc.IsConnected() {
		return n.unsubscribe(subs)
	}
	var errs []error
	closed := make([]<-chan nats.SubStatus, len(subs))
	for i, s := range subs {
		closed[i] = s.StatusChanged(nats.SubscriptionClosed)
		if err := s.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
			closed[i] = nil
		}
	}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	timedOut := false
	for i, c := range closed {
		if c == nil || !subs[i].IsValid() {
			continue
		}
		if !timedOut {
			select {
			case <-c:
				continue
			case <-timeout.C:
				timedOut = true
			}
		}
		errs = append(errs, fmt.Errorf("fleet: draining %s: timed out", subs[i].Subject))
	}
	return errors.Join(errs...)
}

// ownerOf returns the owner of partition p as the table knows it. While
// the fleet forms, a node may take a request before it has heard the
// cell that owns p: it then asks every cell once (for a heartbeat at
// most) before it answers that no owner is known, so a publish waits for
// a heartbeat rather than being refused. It asks at most once a
// heartbeat, so a partition whose owner is truly gone costs the routes
// no more than that.
func (n *Node) ownerOf(p int) (cell string, at time.Time, ok bool) {
	if cell, at, ok = n.table.owner(p); ok {
		return cell, at, ok
	}
	n.gather.Lock()
	defer n.gather.Unlock()
	if cell, at, ok = n.table.owner(p); ok || time.Since(n.gathered) < n.cfg.Heartbeat {
		return cell, at, ok
	}
	n.learnAll()
	n.gathered = time.Now()
	return n.table.owner(p)
}
