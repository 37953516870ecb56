// CRC-32C: the reflected Castagnoli polynomial 0x82F63B78, initial value and final xor
// 0xFFFFFFFF (so crc32cExtend(0, ...) of nothing is 0 and pieces chain).
//
// The instruction's latency is three cycles and it issues one per cycle, so a long piece is
// hashed as three interleaved streams over its thirds, whose CRCs are then joined: the CRC
// of A||B is CRC(A) "shifted" past len(B) bytes (a multiplication by x^(8 len(B)) modulo the
// polynomial) xor CRC(B). Pieces shorter than kThreeWayMin go through one stream.
#include "crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace xccl {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;
constexpr size_t kThreeWayMin = size_t{3} * 1024;

std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t softwareCrc(uint32_t state, const unsigned char* p, size_t n) {
  static const std::array<uint32_t, 256> table = makeTable();
  for (size_t i = 0; i < n; ++i) state = table[(state ^ p[i]) & 0xFF] ^ (state >> 8);
  return state;
}

// a * b modulo the polynomial, both in the reflected representation (bit 31 is x^0).
uint32_t mulModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

// x^(8 n) modulo the polynomial: squarings of x^8 picked by the bits of n.
uint32_t shiftBytes(size_t n) {
  static const std::array<uint32_t, 64> powers = [] {
    std::array<uint32_t, 64> t{};
    t[0] = 1u << 23;  // x^8
    for (size_t k = 1; k < t.size(); ++k) t[k] = mulModP(t[k - 1], t[k - 1]);
    return t;
  }();
  uint32_t r = 1u << 31;  // x^0
  for (size_t k = 0; n != 0; ++k, n >>= 1) {
    if (n & 1) r = mulModP(powers[k], r);
  }
  return r;
}

// The CRC (final value) of A||B from CRC(A) and CRC(B), B being lenB bytes.
uint32_t joinCrc(uint32_t crcA, uint32_t crcB, size_t lenB) {
  return mulModP(shiftBytes(lenB), crcA) ^ crcB;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t oneStream(uint32_t state, const unsigned char* p,
                                                     size_t n) {
  uint64_t s = state;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    s = _mm_crc32_u64(s, word);
  }
  auto s32 = static_cast<uint32_t>(s);
  for (; n > 0; --n) s32 = _mm_crc32_u8(s32, *p++);
  return s32;
}

// Final CRC of n bytes after a running final value crc, three streams at a time.
__attribute__((target("sse4.2"))) uint32_t threeStreams(uint32_t crc, const unsigned char* p,
                                                        size_t n) {
  const size_t third = n / 3 / 8 * 8;
  const unsigned char* a = p;
  const unsigned char* b = p + third;
  const unsigned char* c = p + 2 * third;
  uint64_t sa = ~crc, sb = 0xFFFFFFFFu, sc = 0xFFFFFFFFu;
  for (size_t i = 0; i < third; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, a + i, 8);
    std::memcpy(&wb, b + i, 8);
    std::memcpy(&wc, c + i, 8);
    sa = _mm_crc32_u64(sa, wa);
    sb = _mm_crc32_u64(sb, wb);
    sc = _mm_crc32_u64(sc, wc);
  }
  const size_t lastLen = n - 2 * third;
  const uint32_t crcC = ~oneStream(static_cast<uint32_t>(sc), c + third, lastLen - third);
  const uint32_t crcA = ~static_cast<uint32_t>(sa);
  const uint32_t crcB = ~static_cast<uint32_t>(sb);
  return joinCrc(joinCrc(crcA, crcB, third), crcC, lastLen);
}

// threeStreams() that also stores every word it hashes at dst.
__attribute__((target("sse4.2"))) uint32_t threeStreamsCopy(uint32_t crc, unsigned char* dst,
                                                            const unsigned char* p, size_t n) {
  const size_t third = n / 3 / 8 * 8;
  uint64_t sa = ~crc, sb = 0xFFFFFFFFu, sc = 0xFFFFFFFFu;
  for (size_t i = 0; i < third; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, p + i, 8);
    std::memcpy(&wb, p + third + i, 8);
    std::memcpy(&wc, p + 2 * third + i, 8);
    sa = _mm_crc32_u64(sa, wa);
    sb = _mm_crc32_u64(sb, wb);
    sc = _mm_crc32_u64(sc, wc);
    std::memcpy(dst + i, &wa, 8);
    std::memcpy(dst + third + i, &wb, 8);
    std::memcpy(dst + 2 * third + i, &wc, 8);
  }
  const size_t lastLen = n - 2 * third;
  std::memcpy(dst + 3 * third, p + 3 * third, lastLen - third);
  const uint32_t crcC = ~oneStream(static_cast<uint32_t>(sc), p + 3 * third, lastLen - third);
  return joinCrc(joinCrc(~static_cast<uint32_t>(sa), ~static_cast<uint32_t>(sb), third), crcC,
                 lastLen);
}
#endif

}  // namespace

uint32_t crc32cCopy(uint32_t crc, void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (crc32cHardware() && n >= kThreeWayMin) {
    return threeStreamsCopy(crc, static_cast<unsigned char*>(dst),
                            static_cast<const unsigned char*>(src), n);
  }
#endif
  std::memcpy(dst, src, n);
  return crc32cExtend(crc, dst, n);
}

bool crc32cHardware() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32cSoftware(uint32_t crc, const void* p, size_t n) {
  return ~softwareCrc(~crc, static_cast<const unsigned char*>(p), n);
}

uint32_t crc32cExtend(uint32_t crc, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
#if defined(__x86_64__)
  if (crc32cHardware()) {
    if (n >= kThreeWayMin) return threeStreams(crc, b, n);
    return ~oneStream(~crc, b, n);
  }
#endif
  return ~softwareCrc(~crc, b, n);
}

}  // namespace xccl
