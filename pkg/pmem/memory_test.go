package pmem

import (
	"errors"
	"testing"
)

func TestMemoryRegion(t *testing.T) {
	if _, err := NewMemory(100); !errors.Is(err, ErrSize) {
		t.Fatalf("NewMemory(100): %v, want ErrSize", err)
	}
	m, err := NewMemory(4096)
	if err != nil {
		t.Fatal(err)
	}
	if m.Size() != 4096 || len(m.Bytes()) != 4096 || m.Mode() != ModeMemory || m.Mode().Durable() {
		t.Fatalf("size %d mode %v", m.Size(), m.Mode())
	}
	if err := m.Persist(0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := m.Persist(4000, 100); !errors.Is(err, ErrRange) {
		t.Fatalf("Persist out of range: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Persist(0, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Persist after Close: %v", err)
	}
	if err := m.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}
