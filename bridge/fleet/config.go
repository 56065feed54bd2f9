package fleet

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// ErrInvalidConfig is wrapped by every error about a bad Config.
var ErrInvalidConfig = errors.New("fleet: invalid config")

// Subjects of the fleet. A cell's own subjects are under CellPrefix.<cell>.
const (
	// CellPrefix is the prefix of each cell's own subjects.
	CellPrefix = "$DELAY.CELL"
	// AliveSubject carries each serving cell's Status, each heartbeat.
	AliveSubject = "$DELAY.FLEET.ALIVE"
	// CellsSubject is answered by every serving cell with its Status.
	CellsSubject = "$DELAY.FLEET.CELLS"
	// StalePrefix.<router> tells a router that its map is stale.
	StalePrefix = "$DELAY.FLEET.STALE"
	// RelayPrefix.<router>.<n> is the reply subject of a message a router
	// forwarded: the owner's answer comes back to the router, which hands
	// it to the publisher (see relay.go).
	RelayPrefix = "$DELAY.FLEET.RELAY"
	// QueueGroup is the fleet-wide queue group of the routed subjects.
	QueueGroup = "natsdelay.fleet"
)

// Config configures a cell of a fleet. A zero field means the default shown
// by DefaultConfig.
type Config struct {
	// Cell names this cell in the fleet: 1 to 64 of [A-Za-z0-9_-], the
	// same on every node of a cluster.
	Cell string
	// Partitions is the fleet's number of partitions, fixed when the
	// first cell creates it; a cell that joins takes the fleet's and
	// refuses another. 0 means DefaultPartitions for a new fleet.
	Partitions int
	// Founders, if given, are the cells that create the fleet together:
	// each owns a contiguous share of the partitions, in this order, at
	// epoch 1 (see Split). Cell must be one of them.
	Founders []string
	// DataDir holds the cell's record; "" keeps it in memory only.
	DataDir string
	// Node names this node in the cell's status; default Cell.
	Node string
	// IngestPrefix, AckPrefix and APIPrefix are the fleet's subjects that
	// publishers, consumers and API clients use. Defaults as bridge's.
	IngestPrefix string
	AckPrefix    string
	APIPrefix    string
	// Heartbeat is how often a serving cell tells the fleet its record.
	// Default 250ms.
	Heartbeat time.Duration
	// Silence is how long a cell goes unheard before the fleet answers
	// its partitions' requests with a 503. Default 4 heartbeats.
	Silence time.Duration
	// JoinWait is how long a new cell that is not a founder listens for
	// the fleet's cells before it creates the fleet. Default 1s.
	JoinWait time.Duration
	// MoveTimeout bounds how long a move of partitions from this cell
	// copies them before it is called off: their ingest answers 503 for
	// that long at most, unless the target was asked to commit (see
	// Move). Default 30s.
	MoveTimeout time.Duration
	// ForwardTimeout bounds how long a router waits for the owner's
	// answer to a message it forwarded before it answers the publisher
	// with a 503 (see relay.go). Default 30s.
	ForwardTimeout time.Duration
	// MoveChunk bounds the bytes of messages one request of a move
	// carries; 0 means the server's max_payload less 8 KiB.
	MoveChunk int
	// StepHook, if not nil, is told each step of a move this cell has
	// just persisted or done (see move.go): a crash test's hook.
	StepHook func(step string)
	// Clustered says the cell is a Raft cluster: its record is kept in
	// the cell's replicated store (see keeper.go), so its service must
	// be a Keeper.
	Clustered bool
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		IngestPrefix:   wire.DefaultIngestPrefix,
		AckPrefix:      wire.DefaultAckPrefix,
		APIPrefix:      wire.DefaultAPIPrefix,
		Heartbeat:      250 * time.Millisecond,
		JoinWait:       time.Second,
		MoveTimeout:    30 * time.Second,
		ForwardTimeout: 30 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.IngestPrefix, d.IngestPrefix)
	def(&c.AckPrefix, d.AckPrefix)
	def(&c.APIPrefix, d.APIPrefix)
	def(&c.Node, c.Cell)
	if c.Heartbeat == 0 {
		c.Heartbeat = d.Heartbeat
	}
	if c.Silence == 0 {
		c.Silence = 4 * c.Heartbeat
	}
	if c.JoinWait == 0 {
		c.JoinWait = d.JoinWait
	}
	if c.MoveTimeout == 0 {
		c.MoveTimeout = d.MoveTimeout
	}
	if c.ForwardTimeout == 0 {
		c.ForwardTimeout = d.ForwardTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// cellPattern is what a cell's name may be: one subject token.
var cellPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate reports every bad field at once, each wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if !cellPattern.MatchString(c.Cell) {
		bad("cell %q: want 1 to 64 of A-Z a-z 0-9 _ -", c.Cell)
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		bad("partitions %d: want 1 to %d", c.Partitions, MaxPartitions)
	}
	seen := map[string]bool{}
	for _, f := range c.Founders {
		if !cellPattern.MatchString(f) {
			bad("founding cell %q: want 1 to 64 of A-Z a-z 0-9 _ -", f)
		}
		if seen[f] {
			bad("founding cell %q: given twice", f)
		}
		seen[f] = true
	}
	if len(c.Founders) > 0 && !seen[c.Cell] {
		bad("cell %q is not one of the founding cells %v", c.Cell, c.Founders)
	}
	if p := cmp.Or(c.Partitions, DefaultPartitions); len(c.Founders) > p {
		bad("%d founding cells for %d partitions: want at most one cell a partition", len(c.Founders), p)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Heartbeat", c.Heartbeat}, {"Silence", c.Silence}, {"JoinWait", c.JoinWait}, {"MoveTimeout", c.MoveTimeout}, {"ForwardTimeout", c.ForwardTimeout}} {
		if d.v < 0 {
			bad("%s (%v) must be > 0", d.name, d.v)
		}
	}
	return errors.Join(errs...)
}

// CellSubjects are the prefixes of a cell's own service: where its ingest,
// delivery replies and API live.
func CellSubjects(cell string) (ingest, ack, api string) {
	p := CellPrefix + "." + cell
	return p + ".IN", p + ".ACK", p + ".API"
}

func forwardPrefix(cell string) string { return CellPrefix + "." + cell + ".FWD" }

// movePrefix is the prefix of the subjects on which a cell's serving node
// takes the steps of moves: <prefix>.OUT, IN, COMMIT, ABORT and STATUS.
func movePrefix(cell string) string { return CellPrefix + "." + cell + ".MOVE" }

// MoveSubject is the subject on which cell moves partitions it owns to
// another cell when asked (see MoveRequest).
func MoveSubject(cell string) string { return movePrefix(cell) + ".OUT" }
