package config

import (
	"fmt"
	"time"
)

// The scrub schedule's defaults: every stripe once a week, at most 64 MiB/s
// of drive reads (a 4 TiB node scrubs in under a day).
const (
	DefaultScrubInterval = 168 * time.Hour
	DefaultScrubRate     = 64 << 20
)

// Scrub returns the scrub interval (0: off) and rate in bytes per second,
// with the defaults for unset keys.
func (s *Store) Scrub() (interval time.Duration, bytesPerSecond int64) {
	interval, bytesPerSecond = DefaultScrubInterval, DefaultScrubRate
	if s.ScrubInterval != nil {
		interval = time.Duration(*s.ScrubInterval)
	}
	if s.ScrubRate != nil {
		bytesPerSecond = int64(*s.ScrubRate)
	}
	return interval, bytesPerSecond
}

// DefaultRebuildRate is the background rebuild's default bound, in bytes
// per second of drive I/O.
const DefaultRebuildRate = 200 << 20

// RebuildBytesPerSecond returns rebuild_rate, or DefaultRebuildRate when
// it is unset.
func (s *Store) RebuildBytesPerSecond() int64 {
	if s.RebuildRate > 0 {
		return int64(s.RebuildRate)
	}
	return DefaultRebuildRate
}

func (s *Store) storeDefaults() {
	interval, rate := s.Scrub()
	if s.ScrubInterval == nil {
		d := Duration(interval)
		s.ScrubInterval = &d
	}
	if s.ScrubRate == nil {
		r := Size(rate)
		s.ScrubRate = &r
	}
}

// validate checks the [store] keys every node reads (a cluster node's
// other [store] keys are checked by validateCluster).
func (s *Store) validate() []error {
	var errs []error
	interval, rate := s.Scrub()
	if interval < 0 {
		errs = append(errs, fmt.Errorf("store.scrub_interval %v: want a positive duration like \"168h\", or \"0\" to turn the scrub off", interval))
	}
	if rate <= 0 {
		errs = append(errs, fmt.Errorf("store.scrub_rate %d: want a positive rate in bytes per second like \"64MiB\" "+
			"(to turn the scrub off, set scrub_interval = \"0\")", rate))
	}
	if s.RebuildRate < 0 {
		errs = append(errs, fmt.Errorf("store.rebuild_rate %d: want a positive rate in bytes per second like \"200MiB\"", s.RebuildRate))
	}
	if interval > 0 && rate > 0 && s.DriveSize > 0 {
		total := int64(s.DriveSize) * int64(len(s.Drives))
		if pass := time.Duration(float64(total) / float64(rate) * float64(time.Second)); pass > interval {
			errs = append(errs, fmt.Errorf("store.scrub_rate %d: a pass reads %d bytes (%d drives of drive_size) and takes %v at this rate, "+
				"longer than scrub_interval %v: raise scrub_rate or scrub_interval", rate, total, len(s.Drives), pass.Round(time.Minute), interval))
		}
	}
	return errs
}
