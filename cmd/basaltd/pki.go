package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"basalt/pkg/auth"
	"basalt/pkg/identity"
	"basalt/pkg/pki"
)

// basaltd pki sets up a cluster's security directories (pkg/pki, pkg/auth):
//
//	basaltd pki init  --dir D [--cluster-id UUID] [--nodes 1,2,3] [--hosts 127.0.0.1,localhost]
//	                  [--api https://127.0.0.1:9420] [--show-tokens]
//	basaltd pki issue --dir D --node N [--hosts ...]
//
// init writes, and never overwrites:
//
//	D/ca.crt, D/ca.key          the cluster CA (its certificate names the cluster UUID)
//	D/tokens.json               the API tokens (hashes only): "admin" and "reader"
//	D/node<N>/                  node N's security directory ([security] dir): ca.crt,
//	                            ca.key, node.crt, node.key, tokens.json
//	D/admin.json, D/reader.json basaltctl credentials files (0600) with the tokens
//
// It prints what it wrote, not the tokens (unless --show-tokens): they are
// in the two credentials files only. issue adds a node directory, for a
// node with other host names, signed by D's CA.

// runPKI runs basaltd pki; it returns the exit status.
func runPKI(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "basaltd pki: want a command: init or issue (basaltd pki init --help)")
		return 2
	}
	var err error
	switch args[0] {
	case "init":
		err = pkiInit(args[1:], stdout)
	case "issue":
		err = pkiIssue(args[1:], stdout)
	default:
		err = usage{fmt.Errorf("unknown command %q: want init or issue", args[0])}
	}
	var u usage
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u):
		fmt.Fprintln(stderr, "basaltd pki:", err)
		return 2
	}
	fmt.Fprintln(stderr, "basaltd pki:", err)
	return 1
}

// usage marks command-line errors.
type usage struct{ error }

func pkiInit(args []string, out io.Writer) error {
	fl := flag.NewFlagSet("basaltd pki init", flag.ContinueOnError)
	dir := fl.String("dir", "", "directory to write (required)")
	clusterID := fl.String("cluster-id", "", "the cluster UUID, as in cluster.initial_cluster_id (default: a new one)")
	nodes := fl.String("nodes", "1", "node IDs to write a directory for, comma-separated")
	hosts := fl.String("hosts", "127.0.0.1,localhost", "IP addresses and DNS names the nodes' certificates carry")
	apiURL := fl.String("api", "", "the API URL the credentials files name (default https://<first host>:9420)")
	show := fl.Bool("show-tokens", false, "also print the tokens (they are in admin.json and reader.json anyway)")
	if err := fl.Parse(args); err != nil {
		return usageOr(err)
	}
	if *dir == "" || fl.NArg() > 0 {
		return usage{errors.New("want --dir D and no other arguments")}
	}
	ids, err := parseNodeIDs(*nodes)
	if err != nil {
		return err
	}
	cid := identity.NewClusterUUID()
	if *clusterID != "" {
		if cid, err = identity.ParseClusterUUID(*clusterID); err != nil {
			return usage{fmt.Errorf("--cluster-id: %w", err)}
		}
	}
	hostList := splitList(*hosts)
	if *apiURL == "" {
		*apiURL = "https://" + hostPort(hostList, "9420")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(abs, pki.CACertFile)); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s already holds a CA (%s): pki init never overwrites one; use another --dir, "+
			"or basaltd pki issue for one more node", abs, pki.CACertFile)
	}
	return writeInit(abs, cid, ids, hostList, *apiURL, *show, out)
}

// writeInit writes what pki init promises.
func writeInit(dir string, cid identity.ClusterUUID, ids []uint64, hosts []string, apiURL string, show bool, out io.Writer) error {
	ca, err := pki.NewCA(cid.String())
	if err != nil {
		return err
	}
	if err := ca.Save(dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s, %s: the CA of cluster %s\n", filepath.Join(dir, pki.CACertFile), pki.CAKeyFile, cid)
	tokens := map[auth.Role]string{}
	var file auth.File
	for _, e := range []struct {
		name string
		role auth.Role
	}{{"admin", auth.RoleAdmin}, {"reader", auth.RoleReadOnly}} {
		tok, err := auth.NewToken()
		if err != nil {
			return err
		}
		tokens[e.role] = tok
		file.Tokens = append(file.Tokens, auth.Entry{Name: e.name, Role: e.role, SHA256: auth.Hash(tok)})
	}
	tokensJSON, err := file.Marshal()
	if err != nil {
		return err
	}
	if err := auth.WriteFile(filepath.Join(dir, auth.TokensFile), tokensJSON); err != nil {
		return err
	}
	for _, id := range ids {
		if err := writeNodeDir(dir, ca, cid, id, hosts, tokensJSON, true); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s: node %d's security directory (ca.crt, ca.key, node.crt, node.key, tokens.json)\n",
			filepath.Join(dir, nodeDirName(id)), id)
	}
	for _, c := range []struct {
		file string
		role auth.Role
	}{{"admin.json", auth.RoleAdmin}, {"reader.json", auth.RoleReadOnly}} {
		p := filepath.Join(dir, c.file)
		if err := auth.WriteCredentials(p, auth.Credentials{API: apiURL, CAFile: filepath.Join(dir, pki.CACertFile),
			Token: tokens[c.role]}); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s: basaltctl credentials, role %s (export %s=%s)\n", p, c.role, auth.EnvCredentials, p)
		if show {
			fmt.Fprintf(out, "  %s token: %s\n", c.role, tokens[c.role])
		}
	}
	return nil
}

// writeNodeDir writes dir/node<id>: the node's certificate and key, the
// CA's certificate (and key, withCAKey), the tokens file.
func writeNodeDir(dir string, ca *pki.CA, cid identity.ClusterUUID, id uint64, hosts []string, tokensJSON []byte,
	withCAKey bool) error {
	nd := filepath.Join(dir, nodeDirName(id))
	if withCAKey {
		if err := ca.Save(nd); err != nil {
			return err
		}
	}
	if err := pki.InitNode(nd, ca, pki.Identity{Cluster: cid.String(), Node: id}, hosts); err != nil {
		return err
	}
	return auth.WriteFile(filepath.Join(nd, auth.TokensFile), tokensJSON)
}

func pkiIssue(args []string, out io.Writer) error {
	fl := flag.NewFlagSet("basaltd pki issue", flag.ContinueOnError)
	dir := fl.String("dir", "", "a directory pki init wrote (required)")
	node := fl.Uint64("node", 0, "the node ID (required)")
	hosts := fl.String("hosts", "127.0.0.1,localhost", "IP addresses and DNS names the certificate carries")
	withKey := fl.Bool("ca-key", true, "give the node the CA key too (it can then sign joining nodes)")
	if err := fl.Parse(args); err != nil {
		return usageOr(err)
	}
	if *dir == "" || *node == 0 || fl.NArg() > 0 {
		return usage{errors.New("want --dir D --node N")}
	}
	ca, err := pki.LoadCA(*dir)
	if err != nil {
		return err
	}
	cid, err := identity.ParseClusterUUID(ca.Cluster())
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(*dir, nodeDirName(*node))); err == nil {
		return fmt.Errorf("%s exists: pki issue never overwrites a node's directory", filepath.Join(*dir, nodeDirName(*node)))
	}
	tokensJSON, err := os.ReadFile(filepath.Join(*dir, auth.TokensFile))
	if err != nil {
		return err
	}
	if err := writeNodeDir(*dir, ca, cid, *node, splitList(*hosts), tokensJSON, *withKey); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s: node %d's security directory\n", filepath.Join(*dir, nodeDirName(*node)), *node)
	return nil
}

func nodeDirName(id uint64) string { return "node" + strconv.FormatUint(id, 10) }

func usageOr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usage{err}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseNodeIDs(s string) ([]uint64, error) {
	var ids []uint64
	seen := map[uint64]bool{}
	for _, f := range splitList(s) {
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil || id == 0 || seen[id] {
			return nil, usage{fmt.Errorf("--nodes %q: want distinct node IDs from 1, comma-separated", s)}
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, usage{errors.New("--nodes: want at least one node ID")}
	}
	return ids, nil
}

// hostPort joins the first host with port ("127.0.0.1:9420").
func hostPort(hosts []string, port string) string {
	h := "127.0.0.1"
	if len(hosts) > 0 {
		h = hosts[0]
	}
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + port
}
