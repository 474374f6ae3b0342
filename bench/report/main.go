// Command report turns the raw output of bench/compare.sh into
// docs/bench/results.json, results.md and PNG plots:
//
//	go run ./bench/report -raw /var/tmp/basalt-compare/raw -out docs/bench   # collect and render
//	go run ./bench/report -in docs/bench/results.json -out docs/bench        # render again
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// Results is docs/bench/results.json's companion: the run's metadata lives
// in meta.json next to it, the rows in results.json (a plain list).
func main() {
	raw := flag.String("raw", "", "directory of raw results written by compare.sh (with meta.json)")
	in := flag.String("in", "", "existing results.json to render (instead of -raw)")
	out := flag.String("out", "docs/bench", "output directory")
	flag.Parse()
	if err := run(*raw, *in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(raw, in, out string) error {
	var meta Meta
	var rows []Row
	switch {
	case raw != "":
		if err := readJSON(filepath.Join(raw, "meta.json"), &meta); err != nil {
			return err
		}
		var err error
		if rows, err = collect(raw, meta); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(out, "results.json"), rows); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(out, "meta.json"), meta); err != nil {
			return err
		}
	case in != "":
		if err := readJSON(in, &rows); err != nil {
			return err
		}
		if err := readJSON(filepath.Join(filepath.Dir(in), "meta.json"), &meta); err != nil {
			return err
		}
	default:
		return fmt.Errorf("give -raw DIR or -in results.json")
	}
	if len(rows) == 0 {
		return fmt.Errorf("no results")
	}
	if err := writeMarkdown(filepath.Join(out, "results.md"), rows, meta); err != nil {
		return err
	}
	return plotAll(out, rows, meta)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
