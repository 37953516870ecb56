// Eight or sixteen 16-bit floats to float32 and back with AVX2 and F16C, the same results
// bit for bit as half.h's scalar conversions: float16 through vcvtph2ps/vcvtps2ph (round to
// nearest even, as _Float16's conversions), bfloat16 by the shift and the nearest-even round
// of half.h, a NaN kept with its quiet bit set. Shared by the xdev kernels and the payload
// hash's fused sums (sum64.h). Every function carries the target attribute: call them only
// from functions that carry it too, after halfVectorAvailable() said yes.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define XCCL_HALF_VECTOR __attribute__((target("avx2,f16c")))

namespace xccl {
namespace halfvec {

struct F16 {
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
