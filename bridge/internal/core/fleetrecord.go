package core

// FleetRecord returns the fleet record the store holds, or nil (see
// delaystore.Repository.FleetRecord).
func (s *Service) FleetRecord() ([]byte, error) {
	if err := s.unavailable(); err != nil {
		return nil, err
	}
	b, err := s.gen.Load().repo.FleetRecord()
	if err != nil {
		return nil, unavailable("reading the fleet record: %v", err)
	}
	return b, nil
}

// SetFleetRecord stores b as the fleet record. It returns once the write
// is committed (by a quorum, in a cluster).
func (s *Service) SetFleetRecord(b []byte) error {
	if err := s.unavailable(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.SetFleetRecord(b); err != nil {
		return unavailable("storing the fleet record: %v", err)
	}
	return nil
}
