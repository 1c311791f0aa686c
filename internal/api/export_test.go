package api

// OnClaimWaiting sets a hook called each time a long-poll claim found
// nothing and starts to wait: tests wait on it instead of sleeping.
func (s *Server) OnClaimWaiting(f func()) { s.claimWaiting.Store(&f) }
