package backend

// Health is the state of the storage under a backend, as far as the backend
// knows it; the NVMe target reports it in the SMART / Health Information
// log page of the backend's namespace. The zero value describes a backend
// with nothing to report: no drives, no redundancy, nothing used, no
// errors.
type Health struct {
	// Drives is the number of drive slots the data is spread over, and
	// FailedDrives how many of them hold no usable copy of their data:
	// failed, or replaced and not yet rebuilt. Their redundancy is gone
	// until a rebuild restores it.
	Drives, FailedDrives int
	// Parity is the number of drives the layout may lose without losing
	// data (0: none).
	Parity int
	// CapacityBytes is the data the storage under the backend accepts, and
	// UsedBytes what it holds (thin provisioning: what was written, not the
	// sizes promised). The storage may be shared by several backends.
	CapacityBytes, UsedBytes int64
	// MediaErrors counts reads whose data could not be recovered.
	MediaErrors uint64
	// Failed is set when an internal failure other than lost drives makes
	// the storage unreliable (a store that stopped writing to its drives).
	Failed bool
	// ReadOnly is set when the backend refuses writes.
	ReadOnly bool
}

// HealthReporter is an optional capability of a Backend that knows the
// health of the storage under it (a volume of the log-structured store).
// Health returns it now; it must be cheap (the target calls it for each
// read of the log page) and safe for concurrent use.
//
// A wrapper backend implements it whatever it wraps, forwarding with
// HealthOf, so that ok is false when the wrapped backend has nothing to
// report.
type HealthReporter interface {
	Health() (h Health, ok bool)
}

// HealthOf returns b's health, and false when b (or the backend it wraps)
// has none to report.
func HealthOf(b Backend) (Health, bool) {
	hr, ok := b.(HealthReporter)
	if !ok {
		return Health{}, false
	}
	return hr.Health()
}
