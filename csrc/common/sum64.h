// The payload hash of XCCL_CHECKSUM=1 (algorithms/frame.h): two position-aware sums of the
// message's 32-bit words, built so that hashing while copying costs about what the copy
// costs (two vector additions per 32 bytes, no multiplication in the loop; CRC-32C's
// instruction hashes eight bytes per cycle at best, half of what a copy moves in cache here).
//
// Definition. The message's bytes are read as little-endian 32-bit words w_i (the last one
// padded with zero bytes); word i sits in lane l = i % 16 of step s = i / 16 (a step is 64
// bytes). Per lane, modulo 2^32:
//     A_l = sum of w_i over the lane's words        B_l = sum of s * w_i over them
// and the hash is the pair, modulo 2^32 each, packed low | high << 32:
//     HA = sum over l of alpha_l * A_l              HB = sum over l of beta_l * B_l
// with alpha_l, beta_l fixed odd 32-bit constants.
//
// What it catches, for certain: any change confined to one 32-bit word, every single-bit flip
// among them: A_l moves by some d != 0 modulo 2^32, and HA by alpha_l * d, which an odd factor
// cannot take to zero. Words moved to other places (B weighs them by their step, the lanes by
// their place in it), a block zeroed, duplicated or cut short: caught except by coincidence.
// It is not a cryptographic hash: it guards against faults, not against an adversary.
//
// Everything is a sum modulo 2^32, so a message may be hashed in pieces cut anywhere, in any
// order: each piece adds its own terms, given the offset where it starts in the message.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xccl {

// h plus the terms of n bytes at p, which are the message's bytes from offset `at` on.
uint64_t sum64Extend(uint64_t h, uint64_t at, const void* p, size_t n);
// The same, also copying the bytes to dst (not overlapping src): one pass that loads, hashes
// and stores each word. streaming: for a destination not read again soon, stores that skip
// the cache (where the vector loop serves and dst is aligned as the message is).
uint64_t sum64Copy(uint64_t h, uint64_t at, void* dst, const void* src, size_t n,
                   bool streaming = false);
// dst[i] = a[i] + b[i] for i < count (float32; dst may be a, not b), adding the terms of b's
// bytes, which start at offset `at` of their message: a reduction that hashes what it
// received in the pass that reads it. The sums are IEEE single additions, as a plain loop's.
uint64_t sum64AddFloats(uint64_t h, uint64_t at, float* dst, const float* a, const float* b,
                        size_t count);
// The same for float16 (bf16 false) or bfloat16 (bf16 true) sums, each step widened to
// float32 and rounded once, as the xdev kernels: dst, a and b hold count 16-bit values.
// Whole 64-byte steps of b add and hash in one pass where the CPU has AVX2 and F16C; the
// rest (the ends, or everything elsewhere) is hashed, then added.
uint64_t sum64AddHalves(uint64_t h, uint64_t at, uint16_t* dst, const uint16_t* a,
                        const uint16_t* b, size_t count, bool bf16);
// The definition, one byte at a time (tests compare the fast paths with it).
uint64_t sum64Reference(uint64_t h, uint64_t at, const void* p, size_t n);
// Whether the AVX2 loop serves sum64Extend and sum64Copy here (for logs and benchmarks).
bool sum64Vector();
// Tests: false makes the portable loop serve them even where AVX2 is found (true restores).
void sum64AllowVector(bool allow);

}  // namespace xccl
