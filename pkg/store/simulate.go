package store

// Work runs the writer's background work (destaging, cleaning, freeing,
// checkpoints) until none is left or a budget of steps is spent, on the
// caller's goroutine. It is for a store opened with Options.Simulated, whose
// writer has no goroutine; on any other store it does nothing.
func (s *Store) Work() {
	if s.opts.synchronous {
		s.w.work()
	}
}

// Tick runs the writer's timer work (idle padding of partial stripes,
// time-based checkpoints, the destage rate) as of the store's clock, on the
// caller's goroutine. Like Work, it is for a store opened with
// Options.Simulated and does nothing on any other.
func (s *Store) Tick() {
	if s.opts.synchronous {
		s.w.tick()
	}
}
