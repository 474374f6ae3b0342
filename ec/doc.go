// Package ec computes and uses the parity of stripes: the Reed-Solomon erasure
// code that lets a node lose drives without losing data. It is the only
// package that imports github.com/klauspost/reedsolomon. It knows nothing of
// LBAs, volumes or drives: it turns chunks into parity and back.
//
// # Stripes
//
// A stripe of Geometry{Data: k, Parity: m, ChunkSize: s} is k data chunks
// followed by m parity chunks, s bytes each, each written to a different
// drive. Any m chunks may be lost, and the stripe is rebuilt from the other k.
//
//	stripe index:   0      1     ...   k-1  |   k     ...   k+m-1
//	                data   data        data |   parity      parity
//	                \________ k*s bytes of user data  /
//
// The coding matrix is part of the on-drive format: reedsolomon's default
// (a Vandermonde matrix made systematic), except that with m = 1 the parity
// chunk is the plain XOR of the data chunks. It is fixed here rather than
// offered as an option, and pinned by the known-answer table in selftest.go.
//
// # Checksums
//
// Reed-Solomon can rebuild chunks it is told are missing; it cannot tell which
// chunk is wrong. Every chunk therefore has a CRC32C (Checksum), computed when
// the stripe is written and stored in the metadata that refers to the stripe.
// Verify, Reconstruct and ReconstructData treat a chunk that fails its
// checksum exactly like a missing one, and check every rebuilt chunk against
// its checksum before returning it: more damage than the parity covers is an
// error (ErrTooManyMissing, ErrCorruption), never wrong data.
//
// # Elastic width
//
// When a drive fails, new stripes are written narrower instead of with a hole:
// Narrower keeps Parity and gives the rest of the surviving drives to data, so
// new writes keep full-stripe writes and their protection while the drive is
// replaced. Existing stripes keep their width and are read with
// ReconstructData until rebuilt.
//
// # Self-test
//
// SIMD code paths differ by CPU. SelfTest encodes fixed data for several
// geometries and compares the parity with constants committed in this
// package, then checks reconstruction; a node runs it at start-up with the
// options it serves with and refuses to serve when it fails.
package ec
