// CRC-32C (Castagnoli), the checksum of XCCL_CHECKSUM=1 payloads (algorithms/frame.h): the
// SSE4.2 crc32 instruction where the CPU has it, a table otherwise; both give the same
// value. Checked against RFC 3720's test vectors (tests/cpp/test_transport.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace xccl {

// The CRC of `n` more bytes at `p` after a running value `crc` (0 to start); extending in
// pieces gives the CRC of the whole.
uint32_t crc32cExtend(uint32_t crc, const void* p, size_t n);
// Copies n bytes from src to dst (not overlapping) and returns the CRC extended over them:
// one pass that loads, hashes and stores, instead of a copy and a second read.
uint32_t crc32cCopy(uint32_t crc, void* dst, const void* src, size_t n);
// Whether the hardware instruction serves crc32cExtend here (for logs and benchmarks).
bool crc32cHardware();
// The table's answer whatever the CPU has (tests compare the two paths).
uint32_t crc32cSoftware(uint32_t crc, const void* p, size_t n);

}  // namespace xccl
