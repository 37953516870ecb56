// The checker's own encodings of the narrow floating types (values.h): half and bfloat16
// with integer rounding, FP8 with libm's, none of them the library's code, so that the
// checker does not share the library's mistakes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "values.h"

namespace xt {
namespace {

// FP8, written independently of the library's bit tricks: decode each code, and encode by
// searching the finite codes for the nearest (ties to the even code). e4m3fn saturates at
// 448; e5m2 is infinity from 61440 (where the tie goes to the even, infinite, code).
double fp8DecodeSlow(uint8_t c, bool e4m3) {
  const int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, expMax = e4m3 ? 15 : 31;
  const int e = (c & 0x7f) >> man, m = c & ((1 << man) - 1);
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if (e4m3 && (c & 0x7f) == 0x7f) return std::nan("");
  if (!e4m3 && e == expMax) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - man);
  return sign * std::ldexp(1.0 + std::ldexp(m, -man), e - bias);
}

// Every code's value, [e4m3, e5m2][code], made once.
struct Fp8Tables {
  double v[2][256];
  Fp8Tables() {
    for (int k = 0; k < 2; ++k) {
      for (int c = 0; c < 256; ++c) v[k][c] = fp8DecodeSlow(static_cast<uint8_t>(c), k == 0);
    }
  }
};
const Fp8Tables kFp8;

double fp8Decode(uint8_t c, bool e4m3) { return kFp8.v[e4m3 ? 0 : 1][c]; }

uint8_t fp8Encode(double x, bool e4m3) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(x);
  const int man = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  if (!e4m3 && a >= 61440.0) return sign | 0x7c;
  if (e4m3 && a >= 448.0) return sign | 0x7e;
  if (a == 0) return sign;
  // a = q * 2^(e - man) with q rounded to an integer (nearest even, libm's rounding), e the
  // binade of a but not below the smallest normal's (subnormals share its spacing).
  int e = std::max(std::ilogb(a), 1 - bias);
  double q = std::nearbyint(std::ldexp(a, man - e));
  if (q == std::ldexp(1.0, man + 1)) {  // rounded up into the next binade
    q = std::ldexp(1.0, man);
    ++e;
  }
  const int qi = static_cast<int>(q);
  int code = qi < (1 << man) ? qi : ((e + bias) << man) | (qi - (1 << man));
  if (e4m3 && code > 0x7e) code = 0x7e;  // 464 < a < 480 rounds past 448: saturates
  return sign | static_cast<uint8_t>(code);
}

}  // namespace

uint8_t floatToFp8(double x, bool e4m3) { return fp8Encode(x, e4m3); }
double fp8ToFloat(uint8_t c, bool e4m3) { return fp8Decode(c, e4m3); }

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {  // below 2^-14: subnormal half (unit 2^-24) or zero
    float a;
    std::memcpy(&a, &ax, 4);
    auto m = static_cast<uint32_t>(std::nearbyint(static_cast<double>(a) * 16777216.0));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant = ax & 0x7fffffu;
  uint32_t exp = (ax >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry bumps the exponent
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace xt
