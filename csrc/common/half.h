// The 16- and 8-bit floating types, stored as bits; arithmetic goes through float32. Shared
// by the xdev runtime's kernels and libxccl's devices, so it sits at the bottom, in common/.
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

// The two 8-bit floating types torch and NCCL have (OCP FP8): e4m3fn (4 exponent bits, bias
// 7, 3 mantissa bits, no infinity, S.1111.111 is NaN, largest 448) and e5m2 (5 exponent
// bits, bias 15, 2 mantissa bits, IEEE-like: infinities and NaNs). From float they round to
// nearest even exactly as torch 2.13's `.to()` does (measured): e4m3fn saturates (anything
// past 448, infinity included, becomes +-448), e5m2 does not (past 57344, or from 61440 on
// by the tie to even, it is infinity); NaN stays NaN. Reductions widen to float, operate,
// and round once per step.
struct Float8E4M3 {
  uint8_t bits;
};
struct Float8E5M2 {
  uint8_t bits;
};

namespace fp8 {
// m >> shift (0 < shift < 32), rounded to nearest even.
inline uint32_t shiftRounded(uint32_t m, int shift) {
  const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1u)) ? 1u : 0u);
}
// Nearest-even rounding of |x| (a float's bits without the sign) to a format with `man`
// mantissa bits and exponent bias `bias`, as a code; the caller handles what lies past the
// format (a code whose exponent field overflows is that format's NaN or infinity pattern).
inline uint32_t roundBits(uint32_t absu, int man, int bias) {
  const int e = static_cast<int>(absu >> 23) - 127;  // x = 1.m * 2^e when normal
  if (e < 1 - bias) {  // subnormal in the target (or zero): units of 2^(1 - bias - man)
    // x = M * 2^(e - 23) with M the 24-bit significand, so x in units is M >> shift, rounded
    // to nearest even (integers only: nearbyintf is a library call without SSE4.1). The
    // result may reach the smallest normal's code. A float subnormal, or shift > 25
    // (x under a quarter unit), is 0.
    if (absu < 0x800000u) return 0;
    const int shift = 23 + (1 - bias - man) - e;
    if (shift > 25) return 0;
    return shiftRounded((absu & 0x7fffffu) | 0x800000u, shift);
  }
  uint32_t q = shiftRounded(absu & 0x7fffffu, 23 - man);
  uint32_t ebits = static_cast<uint32_t>(e + bias);
  if (q == (1u << man)) {  // rounded up into the next binade
    q = 0;
    ++ebits;
  }
  return (ebits << man) | q;
}
}  // namespace fp8

inline float toFloat(Float8E4M3 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80u) << 24;
  const uint32_t exp = (v.bits >> 3) & 0xfu, man = v.bits & 0x7u;
  if (exp == 0xf && man == 0x7) return floatOf(sign | 0x7fc00000u);  // NaN
  const float mag =
      exp == 0 ? static_cast<float>(man) * 0x1p-9f : floatOf(((exp + 120) << 23) | (man << 20));
  return sign ? -mag : mag;
}
inline Float8E4M3 fromFloat(float x, Float8E4M3*) {
  const uint32_t u = bitsOf(x), absu = u & 0x7fffffffu;
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  Float8E4M3 r;
  if (absu > 0x7f800000u) {  // NaN
    r.bits = static_cast<uint8_t>(sign | 0x7fu);
  } else if (absu >= 0x43f00000u) {  // infinity, or |x| >= 480: saturates to 448
    r.bits = static_cast<uint8_t>(sign | 0x7eu);
  } else {
    const uint32_t code = fp8::roundBits(absu, 3, 7);
    r.bits = static_cast<uint8_t>(sign | (code == 0x7fu ? 0x7eu : code));  // past 464: 448
  }
  return r;
}

inline float toFloat(Float8E5M2 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80u) << 24;
  const uint32_t exp = (v.bits >> 2) & 0x1fu, man = v.bits & 0x3u;
  if (exp == 0x1f) return floatOf(sign | 0x7f800000u | (man ? 0x400000u : 0u));  // inf / NaN
  const float mag =
      exp == 0 ? static_cast<float>(man) * 0x1p-16f : floatOf(((exp + 112) << 23) | (man << 21));
  return sign ? -mag : mag;
}
inline Float8E5M2 fromFloat(float x, Float8E5M2*) {
  const uint32_t u = bitsOf(x), absu = u & 0x7fffffffu;
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  Float8E5M2 r;
  if (absu > 0x7f800000u) {  // NaN
    r.bits = static_cast<uint8_t>(sign | 0x7fu);
  } else if (absu >= 0x47800000u) {  // infinity, or |x| >= 65536: infinity
    r.bits = static_cast<uint8_t>(sign | 0x7cu);
  } else {
    r.bits = static_cast<uint8_t>(sign | fp8::roundBits(absu, 2, 15));  // 0x7c past 61440: inf
  }
  return r;
}

}  // namespace xccl
