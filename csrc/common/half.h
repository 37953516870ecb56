// The 16-bit floating types, stored as bits; arithmetic goes through float32. Shared by the
// xdev runtime's kernels and libxccl's devices, so it sits at the bottom, in common/.
#pragma once

#include <cstdint>
#include <cstring>

namespace xccl {

// The compiler's binary16 type (_Float16: GCC 12+, clang 15+ on x86) does the conversions;
// older compilers (clang 14, used by scripts/fuzz.sh) get the same conversions in software
// (round to nearest even, subnormals, infinities and NaNs kept).
#if defined(__clang__) && __clang_major__ < 15
#define XCCL_SOFT_HALF 1
#endif

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16.
struct Half {
  uint16_t bits;
};
// bfloat16 (the top 16 bits of a float32).
struct BFloat16 {
  uint16_t bits;
};

#if defined(XCCL_SOFT_HALF)
inline float toFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  return floatOf(u);
}
inline Half fromFloat(float x, Half*) {
  const uint32_t u = bitsOf(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  Half h;
  if (absu > 0x7f800000u) {  // NaN: quiet, keep the top payload bits
    h.bits = static_cast<uint16_t>(sign | 0x7e00u | ((absu >> 13) & 0x3ffu));
  } else if (absu >= 0x477ff000u) {  // rounds to >= 65520: infinity
    h.bits = static_cast<uint16_t>(sign | 0x7c00u);
  } else if (absu >= 0x38800000u) {   // normal in binary16
    uint32_t v = absu - 0x38000000u;  // rebias 127 -> 15
    v += 0xfffu + ((v >> 13) & 1u);   // round to nearest even
    h.bits = static_cast<uint16_t>(sign | (v >> 13));
  } else if (absu >= 0x33000000u) {  // subnormal in binary16 (or rounds up into one)
    const int e = static_cast<int>(absu >> 23);
    const uint32_t m = (absu & 0x7fffffu) | 0x800000u;
    const uint32_t drop = static_cast<uint32_t>(126 - e);  // value = m * 2^(e-150) = r * 2^-24
    uint32_t r = m >> drop;
    const uint32_t rem = m & ((1u << drop) - 1), half = 1u << (drop - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    h.bits = static_cast<uint16_t>(sign | r);
  } else {
    h.bits = sign;  // underflows to zero
  }
  return h;
}
#else
inline float toFloat(Half h) {
  _Float16 f;
  std::memcpy(&f, &h.bits, 2);
  return static_cast<float>(f);
}
inline Half fromFloat(float x, Half*) {
  _Float16 f = static_cast<_Float16>(x);  // round to nearest even
  Half h;
  std::memcpy(&h.bits, &f, 2);
  return h;
}
#endif
inline float toFloat(BFloat16 b) { return floatOf(static_cast<uint32_t>(b.bits) << 16); }
inline BFloat16 fromFloat(float x, BFloat16*) {
  uint32_t u = bitsOf(x);
  BFloat16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
    b.bits = static_cast<uint16_t>((u >> 16) | 0x40);
  } else {  // round to nearest even
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = static_cast<uint16_t>(u >> 16);
  }
  return b;
}

}  // namespace xccl
