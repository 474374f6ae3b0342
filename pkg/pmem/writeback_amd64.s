#include "textflag.h"

// func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL subleaf+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// Each *Range function: AX = first line (addr rounded down to 64),
// CX = addr+n (exclusive end); one instruction per line, then SFENCE.

// func clwbRange(addr unsafe.Pointer, n uintptr)
TEXT ·clwbRange(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
	ANDQ $-64, AX

clwbLoop:
	CLWB (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JB   clwbLoop
	SFENCE
	RET

// func clflushoptRange(addr unsafe.Pointer, n uintptr)
TEXT ·clflushoptRange(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
	ANDQ $-64, AX

clflushoptLoop:
	CLFLUSHOPT (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JB   clflushoptLoop
	SFENCE
	RET

// func clflushRange(addr unsafe.Pointer, n uintptr)
TEXT ·clflushRange(SB), NOSPLIT, $0-16
	MOVQ addr+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
	ANDQ $-64, AX

clflushLoop:
	CLFLUSH (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JB   clflushLoop
	SFENCE
	RET
