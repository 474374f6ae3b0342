package store

// StagesByReference reports whether the volume's store was opened with
// Options.StageByReference, so that WriteStaged and TrimStaged may be used.
func (h *Volume) StagesByReference() bool { return h.s.opts.StageByReference }
