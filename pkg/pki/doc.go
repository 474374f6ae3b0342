// Package pki is the cluster's public-key infrastructure: a certificate
// authority per cluster, a certificate per node naming its cluster and node
// ID, and the TLS configurations with which nodes authenticate each other
// (the Raft transport, node-to-node API calls).
//
// # Trust model
//
// A cluster has one CA, an ECDSA P-256 key and a self-signed certificate
// created at bootstrap (NewCA). Every bootstrap node holds the CA key, so
// that any of them can sign a joining node's certificate signing request
// (SignCSR); a node that joined later holds only the CA certificate. A node
// trusts exactly the certificates its cluster's CA issued: the CA pool of
// every tls.Config this package builds holds that one certificate and no
// system roots. The identity a certificate carries is its URI SAN, not its
// subject or its host names:
//
//	basalt://cluster/<cluster-uuid>/node/<node-id>
//
// with the cluster UUID in canonical 8-4-4-4-12 lower-case hexadecimal
// (pkg/identity) and the node ID in decimal, non-zero, without leading
// zeros. The CA decides the identity and the host names it signs; whatever
// a CSR asks for is ignored except its public key.
//
// All TLS between nodes is TLS 1.3 only. A client verifies the server's
// chain against the CA with the server name ServerName(cluster), a DNS SAN
// every node certificate carries, so that a node is reached by any address
// and still verified; then it checks the URI identity names its cluster.
// The server verifies a client's chain against the CA (required or
// optional, ServerTLS). Which node a peer must be is the caller's check
// (Node.VerifyPeer, PeerIdentity).
//
// # Certificates
//
//	CA certificate (ca.crt)
//	  subject     CN=basalt cluster <cluster-uuid>, O=basalt
//	  URI SAN     basalt://cluster/<cluster-uuid>
//	  validity    20 years (not before: one hour ago, for clock skew)
//	  key usage   certificate sign, CRL sign; basic constraints CA, path length 0
//	  key         ECDSA P-256, self-signed ECDSA with SHA-256
//
//	node certificate (node.crt)
//	  subject     CN=basalt node <node-id>, O=basalt, OU=<cluster-uuid>
//	  URI SAN     basalt://cluster/<cluster-uuid>/node/<node-id>
//	  DNS SANs    ServerName(cluster), then each host name given
//	  IP SANs     each IP address given
//	  validity    10 years (not before: one hour ago)
//	  key usage   digital signature; extended: server auth, client auth
//	  key         the node's (ECDSA P-256 from NewKeyAndCSR), signed by the CA
//
// Serial numbers are 128 random bits.
//
// # Security directory
//
// One directory per node (config [security] dir, default
// <data_dir>/security), written by `basaltd pki init` or InitNode, read by
// LoadNode and LoadCA:
//
//	<dir>/ca.crt    the CA certificate, PEM "CERTIFICATE"             0644
//	<dir>/ca.key    the CA key, PEM "PRIVATE KEY" (PKCS #8)            0600, bootstrap nodes only
//	<dir>/node.crt  this node's certificate, PEM "CERTIFICATE"        0644
//	<dir>/node.key  this node's key, PEM "PRIVATE KEY" (PKCS #8)       0600
//
// A key file may also be PEM "EC PRIVATE KEY" (SEC 1). A key file that
// group or others may read is refused on load. Every file is written
// atomically (a temporary file in the same directory, synced, renamed over
// the name, the directory synced); the directory is created 0700.
package pki
