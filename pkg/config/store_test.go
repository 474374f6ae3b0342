package config

import (
	"strings"
	"testing"
	"time"
)

const singleStoreFile = `
[node]
data_dir = "/var/lib/basalt"
[store]
drives = ["/d0", "/d1", "/d2"]
buffer = "/b"
buffer_size = "1MiB"
`

func TestScrubDefaultsAndExplicitValues(t *testing.T) {
	tests := []struct {
		name, extra  string
		base         string
		wantInterval time.Duration
		wantRate     int64
	}{
		{"single node defaults", "", singleStoreFile, 168 * time.Hour, 64 << 20},
		{"cluster defaults", "", clusterFile, 168 * time.Hour, 64 << 20},
		{"explicit zero string disables", `scrub_interval = "0"`, singleStoreFile, 0, 64 << 20},
		{"explicit zero duration disables", `scrub_interval = "0s"`, clusterFile, 0, 64 << 20},
		{"explicit values", "scrub_interval = \"24h\"\nscrub_rate = \"200MiB\"", singleStoreFile, 24 * time.Hour, 200 << 20},
		{"plain byte count", `scrub_rate = 1048576`, singleStoreFile, 168 * time.Hour, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(write(t, tt.base+tt.extra+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			interval, rate := c.Store.Scrub()
			if interval != tt.wantInterval || rate != tt.wantRate {
				t.Errorf("Scrub() = %v, %d; want %v, %d", interval, rate, tt.wantInterval, tt.wantRate)
			}
			// EnsureDefaults writes the defaults into the file's values.
			if c.Store.ScrubInterval == nil || time.Duration(*c.Store.ScrubInterval) != tt.wantInterval ||
				c.Store.ScrubRate == nil || int64(*c.Store.ScrubRate) != tt.wantRate {
				t.Errorf("store %+v after defaults", c.Store)
			}
		})
	}
}

func TestScrubAccessorWithoutDefaults(t *testing.T) {
	var s Store // as built in code, EnsureDefaults not run
	if interval, rate := s.Scrub(); interval != DefaultScrubInterval || rate != DefaultScrubRate {
		t.Errorf("zero Store: Scrub() = %v, %d", interval, rate)
	}
	zero := Duration(0)
	s.ScrubInterval = &zero
	if interval, _ := s.Scrub(); interval != 0 {
		t.Errorf("explicit 0: interval %v", interval)
	}
}

func TestScrubValidation(t *testing.T) {
	tests := []struct {
		name, extra string
		want        []string
	}{
		{"negative interval", `scrub_interval = "-1h"`, []string{"store.scrub_interval -1h0m0s", "\"0\" to turn the scrub off"}},
		{"not a duration", `scrub_interval = "weekly"`, []string{"scrub_interval", "duration \"weekly\""}},
		{"duration without unit", `scrub_interval = "7"`, []string{"scrub_interval", "duration \"7\""}},
		{"zero rate", `scrub_rate = "0"`, []string{"store.scrub_rate 0", "positive rate", "set scrub_interval = \"0\""}},
		{"negative rate", `scrub_rate = "-5MiB"`, []string{"scrub_rate", "size \"-5MiB\""}},
		{"not a size", `scrub_rate = "fast"`, []string{"scrub_rate", "size \"fast\""}},
		{"pass longer than the interval", "drive_size = \"1TiB\"\nscrub_interval = \"1h\"",
			[]string{"store.scrub_rate 67108864", "3298534883328 bytes (3 drives", "longer than scrub_interval 1h0m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(write(t, singleStoreFile+tt.extra+"\n"))
			if err == nil {
				t.Fatalf("accepted %s", tt.extra)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	// The same checks hold in a cluster node's file.
	_, err := Load(write(t, clusterFile+"scrub_rate = \"0\"\n"))
	if err == nil || !strings.Contains(err.Error(), "store.scrub_rate 0") {
		t.Errorf("cluster file with scrub_rate 0: %v", err)
	}
}

func TestScrubLongEnoughIntervalAccepted(t *testing.T) {
	// 3 x 1 TiB at 64 MiB/s is about 14 h: a day is enough.
	if _, err := Load(write(t, singleStoreFile+"drive_size = \"1TiB\"\nscrub_interval = \"24h\"\n")); err != nil {
		t.Fatal(err)
	}
}
