// Package qos limits a volume's I/O: IOPS and bandwidth, for reads, for
// writes and for both together, each a token bucket with a burst. A
// replicated volume (pkg/volume) asks its Throttle before a command reaches
// Raft on the leader: a write before it is proposed (so it takes no room in
// the write buffer and no CPU of the group's loop while it waits), a read
// before its read barrier. Followers refuse I/O before they ask, so only the
// leader ever throttles, and every replica's node holds the limits (the
// cluster metadata carries them), so a new leader throttles at once.
//
// # Buckets
//
// Each limit is a Limit{Rate, Burst}: Rate tokens per second (a command is
// one token of an IOPS limit, and its bytes are its tokens of a bandwidth
// limit; trims and write-zeroes count as write commands with no bytes), and
// a bucket of Burst tokens (0: Rate, one second's worth), full when the
// volume has been idle. A command takes its tokens from every bucket that
// applies to it (the IOPS and bandwidth limits of its direction and the
// combined ones) and goes when all of them could pay: at once while every
// bucket holds enough, else at the earliest instant at which each has
// refilled what it lacks. Buckets may go into debt by one command's cost,
// so a command larger than a bucket's burst still passes, after a wait.
//
// The buckets are kept as the generic cell rate algorithm keeps them: per
// bucket one "theoretical arrival time" tat, in nanoseconds of the
// throttle's clock. A command of cost c moves tat to max(tat, now) +
// c/Rate and may go at tat - Burst/Rate. The division carries its
// remainder to the next command, so over any window of length T a bucket
// lets at most Burst + Rate×T tokens through, exactly. Reserving computes a
// command's release time at once, in order: nothing polls, and a waiting
// command never has to ask again.
//
// # The bound on waiting
//
// A throttled command waits; it never fails because of its limit. The wait
// is bounded by MaxWait (1 s by default, against the 30 s the Linux NVMe
// host waits for a command before it aborts it and resets the controller,
// nvme_core.io_timeout): a command that would have to wait longer goes
// after MaxWait, and the buckets forgive the debt beyond that bound. The
// limit is then exceeded, and the throttle counts each such command as an
// overrun (Counters). It happens only when a host keeps more commands
// outstanding than the limit lets through in MaxWait: more than 1,000
// commands of 4 KiB queued at once on a 1,000-IOPS volume, say, or one
// 1 MiB write behind 1 MiB of others at 1 MiB/s. Commands already waiting
// keep their release times when the limits change; later ones see the new
// limits at once.
//
// # Cost
//
// With no limit set, a command costs one atomic load. A limited command
// takes one short mutex hold; a throttled one waits on a pooled timer
// (Wait) or in the throttle's queue, served by one goroutine per throttle
// that runs only while the queue is not empty (Defer). Neither allocates
// per command.
//
// Every wait is computed from the throttle's clock (pkg/clock), so with a
// clock.Manual the waits, releases and counters are exact and
// reproducible; Defer's goroutine is the one part a test does not drive
// itself: it sleeps on a timer of that clock, so a test advances the clock
// past a release (clock.Manual.BlockUntil tells when the timer is armed)
// and then waits for the command to resume.
package qos
