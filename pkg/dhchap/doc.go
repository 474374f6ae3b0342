// Package dhchap implements NVMe in-band authentication with DH-HMAC-CHAP
// (NVMe Base 2.0 §8.13, TP 8006): the secret representation that
// `nvme gen-dhchap-key` prints, the key transformation, the hash functions
// and finite field Diffie-Hellman groups, the responses each side computes,
// the authentication messages with strict decoders, and both state
// machines: the controller's (used by the target) and the host's (the one
// the Linux host runs, used by the host library and by tests). It performs
// no I/O and knows nothing of queues or controllers.
//
// One authentication transaction, on one queue, carried by Authentication
// Send (host → controller) and Authentication Receive (controller → host)
// commands:
//
//	host                                        controller
//	AUTH_Negotiate(T_ID, hashes, DH groups) ──▶ choose hash H and group
//	                                        ◀── DH-HMAC-CHAP_Challenge(H, C1, S1, g^y)
//	R1 = HMAC(Kh', C1* ‖ S1 ‖ T_ID ‖ 0 ‖ "HostHost" ‖ NQNh ‖ 0 ‖ NQNc)
//	DH-HMAC-CHAP_Reply(R1, [C2, S2], g^x)   ──▶ check R1
//	                                        ◀── DH-HMAC-CHAP_Success1([R2])
//	R2 = HMAC(Kc', C2* ‖ S2 ‖ T_ID ‖ 0 ‖ "Controller" ‖ NQNc ‖ 0 ‖ NQNh)
//	DH-HMAC-CHAP_Success2                   ──▶ (only when C2 was sent)
//
// Kh' and Kc' are the transformed host and controller secrets (TransformedKey);
// C* is the challenge itself with the null DH group, otherwise the
// augmented challenge HMAC(H(g^xy), C) (AugmentedChallenge). Either side
// that finds a fault ends the transaction with an AUTH_Failure message
// (Failure1 from the controller, Failure2 from the host) carrying a reason
// code explanation (nvme.AuthFailureExplanation).
//
// The computations follow the Linux implementation (drivers/nvme/common,
// host and target), with which a Basalt target must interoperate.
//
// Secrets are never formatted by %v or String: a Secret prints redacted;
// only Secret.Encode returns the representation.
package dhchap
