package replication

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger adapts slog to raft.Logger. Raft's Info messages (every vote
// request and grant of every election) go to Debug: with hundreds of groups
// they would drown the log, and the Host logs leadership changes itself.
// Raft's Fatal and Panic both panic: they report a broken invariant in
// Raft, and library code never exits the process. The group's loop recovers
// the panic and fences that one group (Group.contain), so that it never ends
// the process either; what peers send is checked first (inbound.go), so
// that no message reaches these.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) logf(level slog.Level, format string, args ...any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

func (l raftLogger) Debug(v ...any)                 { l.logf(slog.LevelDebug, "%s", fmt.Sprint(v...)) }
func (l raftLogger) Debugf(format string, v ...any) { l.logf(slog.LevelDebug, format, v...) }
func (l raftLogger) Info(v ...any)                  { l.logf(slog.LevelDebug, "%s", fmt.Sprint(v...)) }
func (l raftLogger) Infof(format string, v ...any)  { l.logf(slog.LevelDebug, format, v...) }
func (l raftLogger) Warning(v ...any)               { l.logf(slog.LevelWarn, "%s", fmt.Sprint(v...)) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.logf(slog.LevelWarn, format, v...)
}
func (l raftLogger) Error(v ...any)                 { l.logf(slog.LevelError, "%s", fmt.Sprint(v...)) }
func (l raftLogger) Errorf(format string, v ...any) { l.logf(slog.LevelError, format, v...) }
func (l raftLogger) Fatal(v ...any)                 { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any) { l.Panicf(format, v...) }

func (l raftLogger) Panic(v ...any) {
	msg := fmt.Sprint(v...)
	l.logf(slog.LevelError, "%s", msg)
	panic("replication: raft: " + msg)
}

func (l raftLogger) Panicf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.logf(slog.LevelError, "%s", msg)
	panic("replication: raft: " + msg)
}
