package dhchap

import (
	"encoding/binary"

	"basalt/pkg/nvme"
)

// AugmentedChallenge returns the challenge as the responses use it when a
// DH group is in use (Linux nvme_auth_augmented_challenge):
//
//	Ca = HMAC-H(H(Ks), C)
//
// where Ks is the session key (the shared DH secret, SharedSecret) and C
// the challenge value of hash length.
func AugmentedChallenge(h nvme.AuthHashID, sessionKey, challenge []byte) []byte {
	m := newHMAC(h, digest(h, sessionKey))
	m.Write(challenge)
	return m.Sum(nil)
}

// HostResponse is the host's response R1 (Linux
// nvme_auth_dhchap_setup_host_response, nvmet_auth_host_hash):
//
//	R1 = HMAC-H(Kh', C1 ‖ LE32(S1) ‖ LE16(T_ID) ‖ 00h ‖ "HostHost" ‖ NQNh ‖ 00h ‖ NQNc)
//
// key is the transformed host secret, c1 the challenge (augmented when a
// DH group is in use).
func HostResponse(h nvme.AuthHashID, key, c1 []byte, s1 uint32, tid uint16, hostNQN, subNQN string) []byte {
	return response(h, key, c1, s1, tid, "HostHost", hostNQN, subNQN)
}

// ControllerResponse is the controller's response R2 in bidirectional
// authentication (Linux nvme_auth_dhchap_setup_ctrl_response,
// nvmet_auth_ctrl_hash):
//
//	R2 = HMAC-H(Kc', C2 ‖ LE32(S2) ‖ LE16(T_ID) ‖ 00h ‖ "Controller" ‖ NQNc ‖ 00h ‖ NQNh)
//
// key is the transformed controller secret (transformed with NQNc).
func ControllerResponse(h nvme.AuthHashID, key, c2 []byte, s2 uint32, tid uint16, hostNQN, subNQN string) []byte {
	return response(h, key, c2, s2, tid, "Controller", subNQN, hostNQN)
}

func response(h nvme.AuthHashID, key, c []byte, seq uint32, tid uint16, role, nqn1, nqn2 string) []byte {
	m := newHMAC(h, key)
	var b [6]byte
	binary.LittleEndian.PutUint32(b[:4], seq)
	binary.LittleEndian.PutUint16(b[4:], tid)
	m.Write(c)
	m.Write(b[:])
	m.Write([]byte{0})
	m.Write([]byte(role))
	m.Write([]byte(nqn1))
	m.Write([]byte{0})
	m.Write([]byte(nqn2))
	return m.Sum(nil)
}
