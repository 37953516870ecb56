// The 16-bit floating types of the kernels, stored as bits; arithmetic goes through float32.
#pragma once

#include <cstdint>
#include <cstring>

namespace xdev {

// IEEE binary16.
struct Half {
  uint16_t bits;
};
// bfloat16 (the top 16 bits of a float32).
struct BFloat16 {
  uint16_t bits;
};

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
inline float toFloat(BFloat16 b) {
  uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline BFloat16 fromFloat(float x, BFloat16*) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  BFloat16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
    b.bits = static_cast<uint16_t>((u >> 16) | 0x40);
  } else {  // round to nearest even
    u += 0x7fffu + ((u >> 16) & 1u);
    b.bits = static_cast<uint16_t>(u >> 16);
  }
  return b;
}

}  // namespace xdev
