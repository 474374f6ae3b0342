package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// socketZeros is every read's data: the echo server stores nothing.
var socketZeros [SocketMaxTransfer]byte

// ServeSocket is the socket engine's echo server (wire format in
// socket.go): it serves every connection accepted on ln in its own
// goroutine until ctx ends, then closes ln and every connection, waits for
// their goroutines and returns nil. It returns the error if Accept fails
// otherwise. A connection that sends a malformed header is closed and the
// error logged (logger nil: discarded); the others carry on. In steady
// state it allocates nothing per request.
func ServeSocket(ctx context.Context, ln net.Listener, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &socketServer{conns: map[net.Conn]struct{}{}}
	stop := context.AfterFunc(ctx, func() { ln.Close(); s.closeAll() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			ln.Close()
			s.closeAll()
			s.wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench: echo server: accepting: %w", err)
		}
		if !s.track(c) {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := serveSocketConn(c); err != nil && !errors.Is(err, net.ErrClosed) {
				logger.Warn("echo server: connection closed", "remote", c.RemoteAddr().String(), "err", err)
			}
			s.untrack(c)
		}()
	}
}

// socketServer tracks ServeSocket's connections so that it can close them.
type socketServer struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// track adds c, or closes it and returns false once closeAll has run.
func (s *socketServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *socketServer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *socketServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// serveSocketConn answers c's requests in order until c ends (nil for the
// host closing between requests) or sends a malformed header. Responses
// are buffered and flushed before any read that could block, so a batch of
// requests is answered with one write.
func serveSocketConn(c net.Conn) error {
	br, bw := bufio.NewReaderSize(c, socketBufSize), bufio.NewWriterSize(c, socketBufSize)
	hdr := make([]byte, socketHeaderSize)
	var data []byte // a write's data, reused
	flushBefore := func(need int) error {
		if br.Buffered() >= need {
			return nil
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("bench: echo server: sending responses: %w", err)
		}
		return nil
	}
	for {
		if err := flushBefore(socketHeaderSize); err != nil {
			return err
		}
		if _, err := io.ReadFull(br, hdr); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("bench: echo server: reading a request: %w", err)
		}
		h := parseSocketHeader(hdr)
		if err := h.check(); err != nil {
			return fmt.Errorf("bench: echo server: request from %s: %w", c.RemoteAddr(), err)
		}
		n := int(h.length)
		if h.op == OpWrite {
			if cap(data) < n {
				data = make([]byte, n)
			}
			if err := flushBefore(n); err != nil {
				return err
			}
			if _, err := io.ReadFull(br, data[:n]); err != nil {
				return fmt.Errorf("bench: echo server: reading a write's %d bytes: %w", n, err)
			}
		}
		bw.Write(hdr) //nolint:errcheck // a bufio error returns from the next Flush
		if h.op == OpRead {
			bw.Write(socketZeros[:n]) //nolint:errcheck // as above
		}
	}
}
