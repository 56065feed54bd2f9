package events

// SetBeforeQueue makes p's Emit call f after it has found p open and
// before it queues the event: the moment a concurrent Close can slip in.
// Call it before p is used.
func SetBeforeQueue(p *Publisher, f func()) { p.beforeQueue = f }
