package main

import (
	"fmt"
	"io"

	"basalt/pkg/api"
)

// printCompression prints a volume's compression and the ratio each node
// achieved on it.
func printCompression(w io.Writer, v api.VolumeView) {
	if v.Compression == "" {
		fmt.Fprintf(w, "Compression:\tnone\n")
		return
	}
	fmt.Fprintf(w, "Compression:\t%s\n", v.Compression)
	for _, p := range v.Paths {
		if c := p.Compression; c != nil {
			fmt.Fprintf(w, "  on %s:\t%.2fx (%d bytes written in %d)\n", nodeName(p.Node, p.Name), c.Ratio,
				c.LogicalBytes, c.StoredBytes)
		}
	}
}
