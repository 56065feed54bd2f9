package dispatch

import (
	"bytes"
	"slices"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// Commits not yet told of: a message committed under a new key is on
// disk, for the due index and for scans to read, a while before its
// committer tells the dispatcher of it (Notify, NotifyMessage). Two
// shortcuts assume nothing of a subject below a key they start from is
// in that window:
//
//   - a hand-off moves its topic's cursor past the message handed off
//     (see handoff.go), so no other writer than the group commit may be
//     in it;
//   - the due index's read starts an idle topic's scan at the entry it
//     read (see subjectTable.admit), not at the subject's first key,
//     whose range holds every settled message not yet compacted away.
//
// A message of the subject committed before that entry's, due before the
// frontier (its entry is never read: its commit is to tell its topic)
// and not yet told of, was below that start: the newer one went out
// alone, the older one after it, once told
// (TestDispatcher_CommittedBehindTheFrontier_NotYetTold_NotOvertaken).
// So each writer counts itself in, with the earliest fire time it
// commits, until it has told the dispatcher of every message it stored,
// and a scan starts no later than the first key of that time.
//
// A scan from a topic's cursor in that window missed a message of the
// batch below the cursor (published with a shorter delay than one of the
// subject already delivered) and took the batch's newer ones; the older
// one, once told, rewound the topic and went out after them
// (TestDispatcher_CommittedBelowTheCursor_NotYetTold_NotOvertaken). The
// group commit notes the keys it stores before its commit
// (IngestingKeys), and a scan of one of their subjects meanwhile first
// rewinds its topic to the subject's smallest, as the tell would a
// moment later: the range it reads again is one the tell would have it
// read, no more.

// pendingCommit is a commit of messages under new keys the dispatcher is
// not yet told of.
type pendingCommit struct {
	// earliestNs is the earliest fire time among its messages.
	earliestNs int64
	// toldInKeyOrder marks the group commit's, whose own messages may be
	// handed off (see NotifyMessage); any other's stop every hand-off.
	toldInKeyOrder bool
	// lowest is, by topic hash, the smallest key it stores, once noted
	// (see IngestingKeys); nil until then, and for other writers.
	lowest map[uint64]keys.Key
}

// pendingCommits are the commits under way. Dispatcher.mu guards them.
type pendingCommits struct {
	open []*pendingCommit
	// others counts those of open not told in key order.
	others int
}

func (p *pendingCommits) add(c *pendingCommit) {
	p.open = append(p.open, c)
	if !c.toldInKeyOrder {
		p.others++
	}
}

func (p *pendingCommits) remove(c *pendingCommit) {
	i := slices.Index(p.open, c)
	if i < 0 {
		return
	}
	p.open = slices.Delete(p.open, i, i+1)
	if !c.toldInKeyOrder {
		p.others--
	}
}

// earliest is the earliest fire time of a message committed and not yet
// told of, never if none is.
func (p *pendingCommits) earliest() int64 {
	at := int64(never)
	for _, c := range p.open {
		at = min(at, c.earliestNs)
	}
	return at
}

// lowestOf is the smallest key of topic hash that a commit under way
// noted it stores, if any did.
func (p *pendingCommits) lowestOf(hash uint64) (keys.Key, bool) {
	var low keys.Key
	found := false
	for _, c := range p.open {
		if k, ok := c.lowest[hash]; ok && (!found || bytes.Compare(k[:], low[:]) < 0) {
			low, found = k, true
		}
	}
	return low, found
}

// scanStart is where a scan of topic hash whose due-index entry k was
// just read may start, with earliestNs the earliest fire time a commit
// not yet told of holds (never if none): k, unless such a commit may hold
// a message of the subject below k.
func scanStart(hash uint64, k keys.Key, earliestNs, bucketMs int64) keys.Key {
	if earliestNs == never {
		return k
	}
	bucket := uint64(0)
	if earliestNs > 0 {
		bucket = keys.Bucket(keys.FireAtMs(earliestNs), bucketMs)
	}
	if floor := keys.New(hash, bucket, 0); bytes.Compare(floor[:], k[:]) < 0 {
		return floor
	}
	return k
}

// Committing counts a commit of messages under new keys by another writer
// than the group commit (a move, a replay, an import), due at earliestNs
// or later (math.MinInt64 if unknown), until the done it returns is
// called, after the dispatcher was told of every message the commit
// stored: meanwhile no message is handed off (see NotifyMessage), and no
// scan starts past a key of earliestNs. Call it before the commit.
func (d *Dispatcher) Committing(earliestNs int64) (done func()) {
	c := d.beginCommit(earliestNs, false)
	return func() { d.endCommit(c) }
}

// Ingesting is Committing for the group commit, whose messages are told
// with NotifyMessage in key order, each batch before the next commits:
// they may be handed off. It returns the epoch to tell them with.
func (d *Dispatcher) Ingesting(earliestNs int64) (Epoch, func()) {
	epoch, _, done := d.IngestingKeys(earliestNs)
	return epoch, done
}

// IngestingKeys is Ingesting with storing, to be called with the keys
// the commit stores once they are chosen and before it commits: while the
// commit is not yet told of, a scan of one of their subjects starts no
// later than the subject's smallest of them, also below its topic's
// cursor (see the top of this file).
func (d *Dispatcher) IngestingKeys(earliestNs int64) (epoch Epoch, storing func([]delaystore.Scheduled), done func()) {
	c := d.beginCommit(earliestNs, true)
	storing = func(stored []delaystore.Scheduled) {
		lowest := make(map[uint64]keys.Key, 1)
		for _, s := range stored {
			h := s.Key.TopicHash()
			if k, ok := lowest[h]; !ok || bytes.Compare(s.Key[:], k[:]) < 0 {
				lowest[h] = s.Key
			}
		}
		d.mu.Lock()
		c.lowest = lowest
		d.mu.Unlock()
	}
	return d.Epoch(), storing, func() { d.endCommit(c) }
}

func (d *Dispatcher) beginCommit(earliestNs int64, toldInKeyOrder bool) *pendingCommit {
	c := &pendingCommit{earliestNs: earliestNs, toldInKeyOrder: toldInKeyOrder}
	d.mu.Lock()
	d.mu.commits.add(c)
	d.mu.Unlock()
	return c
}

// commitDueAt notes that c, begun at never for a time it learns as it
// goes, commits a message due at fireAtNs. Call it before the commit.
func (d *Dispatcher) commitDueAt(c *pendingCommit, fireAtNs int64) {
	d.mu.Lock()
	c.earliestNs = min(c.earliestNs, fireAtNs)
	d.mu.Unlock()
}

func (d *Dispatcher) endCommit(c *pendingCommit) {
	d.mu.Lock()
	d.mu.commits.remove(c)
	d.mu.Unlock()
}

// earliestStart is when the earliest time bucket of ks starts.
func (d *Dispatcher) earliestStart(ks []keys.Key) int64 {
	at := int64(never)
	for _, k := range ks {
		at = min(at, msToNs(keys.BucketStartMs(k.Bucket(), d.bucketMs)))
	}
	return at
}
