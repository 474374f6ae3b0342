package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Persister stores the machine's record durably (pkg/meta in a node,
// memory in tests). Save must have made the record durable when it
// returns nil.
type Persister interface {
	Load() (record []byte, ok bool, err error)
	Save(record []byte) error
}

// record is what the Persister stores and what a snapshot carries: the
// state and the index of the last entry applied to it, together, so that
// they can never disagree.
type record struct {
	Version int    `json:"version"`
	Applied uint64 `json:"applied"`
	State   *State `json:"state"`
}

const recordVersion = 1

// Machine is the cluster metadata state machine (replication.StateMachine):
// it applies metadata commands from the metadata group's log, saves the
// state after each, and publishes immutable snapshots of it.
//
// Apply, Snapshot and Restore are called by the group's single apply
// goroutine; State, Changed and the waiters may be used from anywhere.
type Machine struct {
	persist Persister
	log     *slog.Logger
	// cur is the state and the index it reflects, replaced together.
	cur atomic.Pointer[applied]

	mu struct {
		sync.Mutex
		waiters map[uint64]chan outcome
		subs    []chan struct{}
	}
}

type applied struct {
	state *State
	index uint64
}

// outcome is the result of applying one proposed command.
type outcome struct {
	res Result
	err error
}

// NewMachine loads the persisted state (an empty state if there is none).
func NewMachine(p Persister, log *slog.Logger) (*Machine, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Machine{persist: p, log: log}
	m.mu.waiters = map[uint64]chan outcome{}
	b, ok, err := p.Load()
	if err != nil {
		return nil, fmt.Errorf("cluster: while loading the metadata: %w", err)
	}
	if !ok {
		m.cur.Store(&applied{state: NewState()})
		return m, nil
	}
	r, err := decodeRecord(b)
	if err != nil {
		return nil, err
	}
	m.cur.Store(&applied{state: r.State, index: r.Applied})
	return m, nil
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if r.Version != recordVersion {
		return r, fmt.Errorf("%w: version %d (this code knows %d)", ErrCorrupt, r.Version, recordVersion)
	}
	if r.State == nil {
		r.State = NewState()
	}
	if r.State.Nodes == nil {
		r.State.Nodes = map[NodeID]*Node{}
	}
	if r.State.Volumes == nil {
		r.State.Volumes = map[string]*Volume{}
	}
	return r, nil
}

// State returns the current state. Callers must not modify it.
func (m *Machine) State() *State { return m.cur.Load().state }

// AppliedIndex returns the index of the last applied entry, as persisted.
func (m *Machine) AppliedIndex() uint64 { return m.cur.Load().index }

// Apply applies the command in entry index. Entries at or below the
// applied index are skipped (replayed after a restart). A command that is
// malformed or invalid for the state changes nothing but still advances
// the applied index; its error goes to the proposer, if it waits. Apply
// returns an error only when the state could not be saved.
func (m *Machine) Apply(_ context.Context, index uint64, data []byte) error {
	if index <= m.AppliedIndex() {
		return nil
	}
	cmd, err := DecodeCommand(data)
	next := m.State()
	var res Result
	if err == nil {
		s := next.clone()
		if res, err = s.apply(&cmd); err == nil {
			next = s
		}
	}
	if err != nil && !errors.Is(err, ErrCorrupt) {
		m.log.Debug("metadata command refused", "index", index, "op", cmd.Op, "err", err)
	} else if err != nil {
		m.log.Warn("malformed metadata entry skipped", "index", index, "err", err)
	}
	if serr := m.save(index, next); serr != nil {
		return serr
	}
	m.cur.Store(&applied{state: next, index: index})
	m.finish(cmd.Request, outcome{res, err}, err == nil)
	return nil
}

// RecordIndex implements replication.IndexRecorder: an entry the group
// applied that carried no command (a new leader's empty entry, a
// configuration change) advances the persisted applied index too, so that
// it never lags the start of the group's compacted log (which a restart
// would take for lost metadata).
func (m *Machine) RecordIndex(_ context.Context, index uint64) error {
	cur := m.cur.Load()
	if index <= cur.index {
		return nil
	}
	if err := m.save(index, cur.state); err != nil {
		return err
	}
	m.cur.Store(&applied{state: cur.state, index: index})
	return nil
}

func (m *Machine) save(index uint64, s *State) error {
	b, err := json.Marshal(record{Version: recordVersion, Applied: index, State: s})
	if err != nil {
		return fmt.Errorf("cluster: while encoding the metadata: %w", err)
	}
	if err := m.persist.Save(b); err != nil {
		return fmt.Errorf("cluster: while saving the metadata at index %d: %w", index, err)
	}
	return nil
}

// finish hands the outcome to the waiting proposer and, if the state
// changed, wakes the subscribers.
func (m *Machine) finish(req uint64, o outcome, changed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.mu.waiters[req]; req != 0 && ch != nil {
		ch <- o // capacity 1, one outcome per request
		delete(m.mu.waiters, req)
	}
	if changed {
		for _, ch := range m.mu.subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Snapshot writes the state and its applied index. It may run
// concurrently with Apply.
func (m *Machine) Snapshot(w io.Writer) error {
	cur := m.cur.Load()
	b, err := json.Marshal(record{Version: recordVersion, Applied: cur.index, State: cur.state})
	if err != nil {
		return fmt.Errorf("cluster: while encoding a snapshot: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// Restore replaces the state with a snapshot taken at index.
func (m *Machine) Restore(r io.Reader, index uint64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("cluster: while reading a snapshot: %w", err)
	}
	rec, err := decodeRecord(b)
	if err != nil {
		return err
	}
	if err := m.save(index, rec.State); err != nil {
		return err
	}
	m.cur.Store(&applied{state: rec.State, index: index})
	m.finish(0, outcome{}, true)
	return nil
}

// Changed returns a channel that receives a value (coalesced) after every
// change of the state. It is never closed.
func (m *Machine) Changed() <-chan struct{} {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	m.mu.subs = append(m.mu.subs, ch)
	m.mu.Unlock()
	return ch
}

// expect registers a waiter for the outcome of request req.
func (m *Machine) expect(req uint64) <-chan outcome {
	ch := make(chan outcome, 1)
	m.mu.Lock()
	m.mu.waiters[req] = ch
	m.mu.Unlock()
	return ch
}

// forget drops the waiter of req (the proposal failed or was abandoned).
func (m *Machine) forget(req uint64) {
	m.mu.Lock()
	delete(m.mu.waiters, req)
	m.mu.Unlock()
}
