package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// pprofEnv names the environment variable that turns on the Go profiling
// endpoint: BASALT_PPROF=host:port serves net/http/pprof's handlers under
// /debug/pprof/ on that address (port 0: any free port; the address bound
// is logged as "pprof listening"). Unset or empty, the default, basaltd
// serves no profiling endpoint. It is meant for a developer measuring a
// node (heap, goroutines, CPU): the endpoint has no authentication, so
// bind it to a loopback address.
const pprofEnv = "BASALT_PPROF"

// startPprof serves the profiling endpoint when pprofEnv is set and
// returns the address bound, or "" when it is not set.
func startPprof(log *slog.Logger) (string, error) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return "", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", pprofEnv, addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof endpoint stopped", "err", err)
		}
	}()
	bound := ln.Addr().String()
	log.Warn("pprof listening: unauthenticated profiling endpoint ("+pprofEnv+")", "addr", bound)
	return bound, nil
}
