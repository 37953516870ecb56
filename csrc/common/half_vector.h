// Eight or sixteen 16- and 8-bit floats to float32 and back with AVX2 and F16C, the same
// results bit for bit as half.h's scalar conversions: float16 through vcvtph2ps/vcvtps2ph
// (round to nearest even, as _Float16's conversions), bfloat16 by the shift and the
// nearest-even round of half.h, a NaN kept with its quiet bit set; the FP8 types by half.h's
// decoding and rounding in integer lanes. Shared
// by the xdev kernels and the payload hash's fused sums (sum64.h). Every function carries the
// target attribute: call them only from functions that carry it too, after available() said
// yes.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define XCCL_HALF_VECTOR __attribute__((target("avx2,f16c")))

namespace xccl {
namespace halfvec {

struct F16 {
  using Elem = uint16_t;
  XCCL_HALF_VECTOR static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  XCCL_HALF_VECTOR static void store(uint16_t* p, __m256 x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  XCCL_HALF_VECTOR static void store2(uint16_t* p, __m256 x, __m256 y) {
    store(p, x);
    store(p + 8, y);
  }
};

struct BF16 {
  using Elem = uint16_t;
  XCCL_HALF_VECTOR static __m256 load(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  // u + 0x7fff + (bit 16 of u), the top half; a NaN keeps its top half with the quiet bit
  // (bit 22, 0x40 of the top half) set and is not rounded.
  XCCL_HALF_VECTOR static __m256i round(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i offset =
        _mm256_andnot_si256(nan, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
    const __m256i quiet = _mm256_and_si256(nan, _mm256_set1_epi32(0x400000));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_or_si256(u, quiet), offset), 16);
  }
  XCCL_HALF_VECTOR static void store(uint16_t* p, __m256 x) {
    const __m256i bits = round(x);
    // Every lane holds 16 significant bits, so the saturating pack keeps them unchanged.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  // Sixteen at once: one pack for both halves, then the 64-bit quarters put back in order.
  XCCL_HALF_VECTOR static void store2(uint16_t* p, __m256 x, __m256 y) {
    const __m256i packed = _mm256_packus_epi32(round(x), round(y));  // x0 y0 x1 y1 (quarters)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xd8));
  }
};

// OCP FP8 with `kMan` mantissa bits and exponent bias `kBias`; kSaturate: e4m3fn, whose largest
// value (448) takes everything past it and infinities, where e5m2 has infinities.
template <int kMan, int kBias, bool kSaturate>
struct Fp8 {
  using Elem = uint8_t;
  // half.h's toFloat in lanes: a normal code is its bits moved under a float's exponent and
  // rebased; a subnormal one is its mantissa times the smallest subnormal (exact); e4m3fn's
  // S.1111.111 is a quiet NaN, e5m2's top exponent infinity or a quiet NaN; the sign last.
  XCCL_HALF_VECTOR static __m256 load(const uint8_t* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
    const __m256i normal =
        _mm256_add_epi32(_mm256_slli_epi32(mag, 23 - kMan), _mm256_set1_epi32((127 - kBias) << 23));
    const __m256i manMask = _mm256_set1_epi32((1 << kMan) - 1);
    // Subnormal codes (exponent field 0) are the mantissa in units of 2^(1 - bias - man).
    const __m256 unit = _mm256_castsi256_ps(_mm256_set1_epi32((128 - kBias - kMan) << 23));
    const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mag), unit));
    const __m256i isSub = _mm256_cmpgt_epi32(_mm256_set1_epi32(1 << kMan), mag);
    __m256i bits = _mm256_blendv_epi8(normal, sub, isSub);
    if (kSaturate) {  // only S.1111.111 is special: NaN
      const __m256i nan = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
      bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000), nan);
    } else {  // the top exponent: infinity (mantissa 0) or NaN
      const __m256i top = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f - (1 << kMan)));
      const __m256i nanBit = _mm256_andnot_si256(
          _mm256_cmpeq_epi32(_mm256_and_si256(mag, manMask), _mm256_setzero_si256()),
          _mm256_set1_epi32(0x400000));
      bits = _mm256_blendv_epi8(bits, _mm256_or_si256(_mm256_set1_epi32(0x7f800000), nanBit), top);
    }
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
  }
  // fp8::roundBits over eight lanes: the normal codes by rounding the float's bits rebased to
  // this bias (the carry moves into the exponent as the scalar code's does), the subnormal
  // ones as the 24-bit significand shifted right by lane, rounded to nearest even (a shift
  // of 32 or more gives 0, as float subnormals and values under a quarter unit must).
  XCCL_HALF_VECTOR static __m256i round(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i one = _mm256_set1_epi32(1);
    constexpr int kShift = 23 - kMan;
    const __m256i v = _mm256_sub_epi32(absu, _mm256_set1_epi32((127 - kBias) << 23));
    const __m256i normal = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(v, _mm256_set1_epi32((1 << (kShift - 1)) - 1)),
                         _mm256_and_si256(_mm256_srli_epi32(v, kShift), one)),
        kShift);
    const __m256i expField = _mm256_srli_epi32(absu, 23);
    const __m256i shift = _mm256_sub_epi32(_mm256_set1_epi32(151 - kBias - kMan), expField);
    const __m256i m = _mm256_or_si256(_mm256_and_si256(absu, _mm256_set1_epi32(0x7fffff)),
                                      _mm256_set1_epi32(0x800000));
    const __m256i halfUnit =
        _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(shift, one)), one);
    const __m256i sub =
        _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(m, halfUnit),
                                           _mm256_and_si256(_mm256_srlv_epi32(m, shift), one)),
                          shift);
    // Normal in this format: the exponent field at least 128 - bias (e >= 1 - bias).
    const __m256i isNormal = _mm256_cmpgt_epi32(expField, _mm256_set1_epi32(127 - kBias));
    __m256i code = _mm256_blendv_epi8(sub, normal, isNormal);
    if (kSaturate) {  // e4m3fn: past 464 the code is NaN's; 448 instead, and from 480 on
      const __m256i nanCode = _mm256_set1_epi32(0x7f);
      code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e), _mm256_cmpeq_epi32(code, nanCode));
      const __m256i big = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x43f00000 - 1));
      code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e), big);
    } else {  // e5m2: from 65536 on, infinity
      const __m256i big = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x47800000 - 1));
      code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7c), big);
    }
    const __m256i nan = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f), nan);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    return _mm256_or_si256(code, sign);
  }
  XCCL_HALF_VECTOR static void store(uint8_t* p, __m256 x) {
    const __m256i c = round(x);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(w, w));
  }
  XCCL_HALF_VECTOR static void store2(uint8_t* p, __m256 x, __m256 y) {
    store(p, x);
    store(p + 8, y);
  }
};
using E4M3 = Fp8<3, 7, true>;    // half.h's Float8E4M3
using E5M2 = Fp8<2, 15, false>;  // half.h's Float8E5M2

// AVX2 (which the compilers' builtin knows) and F16C (CPUID leaf 1, ECX bit 29: clang 14's
// builtin does not know the name).
inline bool available() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return has;
}

}  // namespace halfvec
}  // namespace xccl

#endif  // __x86_64__
