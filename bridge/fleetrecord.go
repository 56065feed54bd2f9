package bridge

// What a cell of a fleet that is a cluster (package bridge/fleet) uses to
// keep its record of the fleet in the replicated store: the node that
// leads reads the record there when it starts to serve (OnServe), and
// writes each change there, so that the next leader carries a move on
// where the last one left it.

// FleetRecord returns the fleet record the store holds, or nil.
func (s *Service) FleetRecord() ([]byte, error) {
	return s.core.Load().FleetRecord()
}

// SetFleetRecord stores b as the fleet record; in a cluster it returns
// once a quorum holds it, and only the leader can.
func (s *Service) SetFleetRecord(b []byte) error {
	return s.core.Load().SetFleetRecord(b)
}

// OnServe has f run each time this node of a cluster starts to serve as
// leader: once its store is up, before it takes ingest and the API, and
// at once if it serves already. From then on every topic is frozen (see
// SetFrozen) while the node does not serve, and from each start until f
// has run: f reads what the last leader left and sets what is frozen. An
// error from f is a start that failed: the node hands its leadership
// over. OnServe(nil) ends it.
func (s *Service) OnServe(f func() error) error {
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	s.onServe = f
	if s.serving && f != nil {
		return f()
	}
	return nil
}

// freezeAll freezes every topic, while a node with a serve hook does not
// serve. serveMu must be held.
func (s *Service) freezeAll() {
	if s.onServe == nil {
		return
	}
	all := func(uint64) bool { return true }
	s.frozen.unserved.Store(true)
	s.frozen.f.Store(&all)
}
