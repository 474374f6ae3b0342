package ec

import (
	"errors"
	"strings"
	"testing"
)

func TestGeometryValidateReportsEveryProblem(t *testing.T) {
	tests := []struct {
		g        Geometry
		problems []string // substrings; empty means valid
	}{
		{Geometry{Data: 4, Parity: 2, ChunkSize: 64 << 10}, nil},
		{Geometry{Data: 1, Parity: 0, ChunkSize: 4096}, nil},
		{Geometry{Data: 60, Parity: 4, ChunkSize: MaxChunkSize}, nil},
		{Geometry{Data: 0, Parity: 1, ChunkSize: 4096}, []string{"data chunks 0"}},
		{Geometry{Data: 2, Parity: -1, ChunkSize: 4096}, []string{"parity chunks -1"}},
		{Geometry{Data: 61, Parity: 4, ChunkSize: 4096}, []string{"width 61+4"}},
		{Geometry{Data: 2, Parity: 1, ChunkSize: 4095}, []string{"chunk size 4095"}},
		{Geometry{Data: 2, Parity: 1, ChunkSize: MaxChunkSize + 4096}, []string{"chunk size"}},
		{Geometry{Data: 0, Parity: -2, ChunkSize: 0}, []string{"data chunks 0", "parity chunks -2", "chunk size 0"}},
	}
	for _, tt := range tests {
		err := tt.g.Validate()
		if len(tt.problems) == 0 {
			if err != nil {
				t.Errorf("%v: unexpected error %v", tt.g, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidGeometry) {
			t.Errorf("%v: error %v, want ErrInvalidGeometry", tt.g, err)
			continue
		}
		for _, p := range tt.problems {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%v: error %q does not mention %q", tt.g, err, p)
			}
		}
	}
}

func TestGeometrySizesAndString(t *testing.T) {
	g := Geometry{Data: 4, Parity: 2, ChunkSize: 64 << 10}
	if g.Width() != 6 || g.DataSize() != 256<<10 || g.String() != "4+2x64KiB" {
		t.Fatalf("Width %d DataSize %d String %q", g.Width(), g.DataSize(), g.String())
	}
	if s := (Geometry{Data: 1, Parity: 0, ChunkSize: 100}).String(); s != "1+0x100B" {
		t.Fatalf("String() = %q", s)
	}
}

// Elastic width: losing drives narrows new stripes' data width and keeps the
// parity, down to one data chunk; below that, writing must stop.
func TestNarrowerKeepsParityAndShrinksData(t *testing.T) {
	g := Geometry{Data: 4, Parity: 2, ChunkSize: 64 << 10}
	tests := []struct {
		survivors int
		want      Geometry
		wantErr   error
	}{
		{8, g, nil},
		{6, g, nil},
		{5, Geometry{Data: 3, Parity: 2, ChunkSize: 64 << 10}, nil},
		{3, Geometry{Data: 1, Parity: 2, ChunkSize: 64 << 10}, nil},
		{2, Geometry{}, ErrTooFewDrives},
		{0, Geometry{}, ErrTooFewDrives},
	}
	for _, tt := range tests {
		got, err := Narrower(g, tt.survivors)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("Narrower(%v, %d) = %v, %v; want %v, %v", g, tt.survivors, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if vErr := got.Validate(); vErr != nil {
				t.Errorf("narrowed geometry %v is invalid: %v", got, vErr)
			}
		}
	}
	if _, err := Narrower(Geometry{Data: 1, Parity: 1, ChunkSize: 1}, 5); !errors.Is(err, ErrInvalidGeometry) {
		t.Fatalf("invalid geometry: %v", err)
	}
	// 1+0 (one drive, no parity) loses its only drive: nothing can be written.
	if _, err := Narrower(Geometry{Data: 1, Parity: 0, ChunkSize: 4096}, 0); !errors.Is(err, ErrTooFewDrives) {
		t.Fatalf("1+0 with no drives: %v", err)
	}
}
