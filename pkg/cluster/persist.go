package cluster

import (
	"sync"
)

// MemoryPersister keeps the record in memory (tests).
type MemoryPersister struct {
	mu     sync.Mutex
	record []byte
	// Fail, if set, is returned by Save.
	Fail error
}

// Load implements Persister.
func (p *MemoryPersister) Load() ([]byte, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.record...), p.record != nil, nil
}

// Save implements Persister.
func (p *MemoryPersister) Save(record []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Fail != nil {
		return p.Fail
	}
	p.record = append([]byte(nil), record...)
	return nil
}
