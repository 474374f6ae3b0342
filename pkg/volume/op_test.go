package volume

import (
	"bytes"
	"errors"
	"testing"

	"basalt/replication"
)

func TestOpsRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte{0xAB}, 8192)
	tests := []struct {
		kind   opKind
		offset int64
		length int64
		data   []byte
	}{
		{opWrite, 4096, 8192, data},
		{opTrim, 0, 1 << 30, nil},
		{opWriteZeroes, 1 << 40, 512, nil},
	}
	for _, tt := range tests {
		entry := encodeOp(tt.kind, tt.offset, tt.length, tt.data)
		o, err := decodeOp(entry[replication.ProposalHeaderSize:])
		if err != nil {
			t.Fatalf("%v: %v", tt.kind, err)
		}
		if o.kind != tt.kind || o.offset != tt.offset || o.length != tt.length || !bytes.Equal(o.data, tt.data) {
			t.Fatalf("%v: decoded %+v", tt.kind, o)
		}
	}
}

func TestOpsRejectMalformed(t *testing.T) {
	good := encodeOp(opWrite, 0, 4, []byte{1, 2, 3, 4})[replication.ProposalHeaderSize:]
	mutate := func(f func(p []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := map[string][]byte{
		"short":             good[:10],
		"version":           mutate(func(p []byte) []byte { p[0] = 2; return p }),
		"kind zero":         mutate(func(p []byte) []byte { p[1] = 0; return p }),
		"kind unknown":      mutate(func(p []byte) []byte { p[1] = 4; return p }),
		"reserved":          mutate(func(p []byte) []byte { p[5] = 1; return p }),
		"negative offset":   mutate(func(p []byte) []byte { p[15] = 0x80; return p }),
		"zero length":       mutate(func(p []byte) []byte { clear(p[16:24]); return p }),
		"data too short":    good[:len(good)-1],
		"trim with data":    mutate(func(p []byte) []byte { p[1] = byte(opTrim); return p }),
		"length mismatched": mutate(func(p []byte) []byte { p[16] = 5; return p }),
	}
	for name, payload := range tests {
		if _, err := decodeOp(payload); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decodeOp = %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzDecodeOp(f *testing.F) {
	f.Add(encodeOp(opWrite, 4096, 4, []byte{1, 2, 3, 4})[replication.ProposalHeaderSize:])
	f.Add(encodeOp(opTrim, 0, 4096, nil)[replication.ProposalHeaderSize:])
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeOp(b)
		if err == nil && (o.offset < 0 || o.length <= 0 || (o.kind == opWrite && int64(len(o.data)) != o.length)) {
			t.Fatalf("accepted an inconsistent op %+v", o)
		}
	})
}
