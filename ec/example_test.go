package ec_test

import (
	"fmt"

	"basalt/ec"
)

// A 4+2 stripe loses two chunks, one missing and one corrupt, and is rebuilt.
func ExampleCodec_Reconstruct() {
	codec, err := ec.New(ec.Geometry{Data: 4, Parity: 2, ChunkSize: 4096})
	if err != nil {
		panic(err)
	}
	stripe := codec.AllocStripe()
	for i, chunk := range stripe[:4] {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
	}
	if err := codec.Encode(stripe); err != nil {
		panic(err)
	}
	sums := make([]uint32, 6)
	if err := codec.ChecksumStripe(stripe, sums); err != nil { // kept in the metadata
		panic(err)
	}

	stripe[1] = nil       // the drive holding chunk 1 is gone
	stripe[4][10] ^= 0xff // chunk 4 comes back corrupt
	bad, _ := codec.Verify(stripe, sums)
	fmt.Println("bad chunks:", bad)

	if err := codec.Reconstruct(stripe, sums); err != nil {
		panic(err)
	}
	bad, err = codec.Verify(stripe, sums)
	fmt.Println("after reconstruct:", bad, err)
	// Output:
	// bad chunks: [1 4]
	// after reconstruct: [] <nil>
}

// New stripes narrow when a node of six drives loses one.
func ExampleNarrower() {
	g := ec.Geometry{Data: 4, Parity: 2, ChunkSize: 64 << 10}
	narrowed, err := ec.Narrower(g, 5)
	fmt.Println(narrowed, err)
	// Output: 3+2x64KiB <nil>
}
