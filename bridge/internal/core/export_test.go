package core

// AfterCommitForTest makes f be called after each commit of the group
// commit, before the dispatcher is told of the batch. Set it before the
// first message is scheduled.
func (s *Service) AfterCommitForTest(f func()) { s.gen.Load().w.afterCommit = f }
