// The two position-aware sums (sum64.h). A piece is hashed as: the words before its first
// 64-byte step boundary, one at a time; then whole steps, where each lane's sum A and the sum
// P of A's running values are kept (B over the piece is (first step + steps) * A - P, since
// the running value after step t holds word u exactly (steps - u) times); then the words after
// the last whole step. The steps go through an AVX2 loop where the CPU has it: two vectors of
// eight lanes, each step two additions per vector.
#include "sum64.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "half.h"
#include "half_vector.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xccl {
namespace {

constexpr size_t kLanes = 16;  // 32-bit words per 64-byte step
constexpr size_t kStepBytes = 4 * kLanes;

constexpr uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr std::array<uint32_t, kLanes> weights(uint64_t seed) {
  std::array<uint32_t, kLanes> w{};
  for (size_t l = 0; l < kLanes; ++l) w[l] = static_cast<uint32_t>(mix(seed + l)) | 1u;
  return w;
}
constexpr std::array<uint32_t, kLanes> kAlpha = weights(0x5851F42Dull);
constexpr std::array<uint32_t, kLanes> kBeta = weights(0xD1B54A32ull);

struct Sums {
  uint32_t a, b;  // HA, HB
};
Sums unpack(uint64_t h) { return {static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)}; }
uint64_t pack(Sums s) { return s.a | (static_cast<uint64_t>(s.b) << 32); }

// Word (or the part of it given) w, at word index i of the message.
void addWord(Sums& h, uint64_t i, uint32_t w) {
  const size_t l = i % kLanes;
  const auto step = static_cast<uint32_t>(i / kLanes);
  h.a += kAlpha[l] * w;
  h.b += kBeta[l] * (step * w);
}

// The word made of k < 4 bytes at p that sit at byte `from` of their word (the rest zero).
uint32_t partialWord(const unsigned char* p, size_t from, size_t k) {
  uint32_t w = 0;
  for (size_t t = 0; t < k; ++t) w |= static_cast<uint32_t>(p[t]) << (8 * (from + t));
  return w;
}

// The lanes' A and P over `steps` whole steps, first at step s0, into h.
void fold(Sums& h, uint32_t s0, size_t steps, const uint32_t* a, const uint32_t* p) {
  const uint32_t end = s0 + static_cast<uint32_t>(steps);
  for (size_t l = 0; l < kLanes; ++l) {
    h.a += kAlpha[l] * a[l];
    h.b += kBeta[l] * (end * a[l] - p[l]);
  }
}

template <bool kCopy>
void stepsScalar(Sums& h, uint32_t s0, unsigned char* dst, const unsigned char* src, size_t steps) {
  if (kCopy) std::memcpy(dst, src, steps * kStepBytes);
  uint32_t a[kLanes] = {}, p[kLanes] = {};
  for (size_t t = 0; t < steps; ++t) {
    for (size_t l = 0; l < kLanes; ++l) {
      uint32_t w;
      std::memcpy(&w, src + t * kStepBytes + 4 * l, 4);
      a[l] += w;
      p[l] += a[l];
    }
  }
  fold(h, s0, steps, a, p);
}

#if defined(__x86_64__)
// fold() of the lanes kept in two vectors each (lanes 0-7, 8-15).
__attribute__((target("avx2"))) void foldVectors(Sums& h, uint32_t s0, size_t steps, __m256i a0,
                                                 __m256i a1, __m256i p0, __m256i p1) {
  alignas(32) uint32_t a[kLanes], p[kLanes];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(a + 8), a1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(p), p0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(p + 8), p1);
  fold(h, s0, steps, a, p);
}

// The lanes' running sums over the steps seen: A (a0: lanes 0-7, a1: 8-15) and the sum P of
// A's running values (p0, p1). Every loop below hashes its steps through these.
struct LaneSums {
  __m256i a0, a1, p0, p1;
};
__attribute__((target("avx2"))) inline LaneSums laneStart() {
  const __m256i z = _mm256_setzero_si256();
  return {z, z, z, z};
}
// One step: its two vectors of words.
__attribute__((target("avx2"))) inline void laneStep(LaneSums& s, __m256i w0, __m256i w1) {
  s.a0 = _mm256_add_epi32(s.a0, w0);
  s.a1 = _mm256_add_epi32(s.a1, w1);
  s.p0 = _mm256_add_epi32(s.p0, s.a0);
  s.p1 = _mm256_add_epi32(s.p1, s.a1);
}
__attribute__((target("avx2"))) inline void laneFold(Sums& h, uint32_t s0, size_t steps,
                                                     const LaneSums& s) {
  foldVectors(h, s0, steps, s.a0, s.a1, s.p0, s.p1);
}

// kStream: non-temporal stores (dst 16-byte aligned), for a destination not read again soon:
// its lines are not first read into the cache, nor evict the caller's working set.
template <bool kCopy, bool kStream>
__attribute__((target("avx2"))) void stepsAvx2(Sums& h, uint32_t s0, unsigned char* dst,
                                               const unsigned char* src, size_t steps) {
  LaneSums lanes = laneStart();
  for (size_t t = 0; t < steps; ++t) {
    const auto* in = reinterpret_cast<const __m256i*>(src + t * kStepBytes);
    const __m256i w0 = _mm256_loadu_si256(in);
    const __m256i w1 = _mm256_loadu_si256(in + 1);
    if (kCopy) {
      auto* out = reinterpret_cast<__m256i*>(dst + t * kStepBytes);
      if (kStream) {  // 16-byte stores: dst need only be as aligned as malloc's blocks
        auto* o = reinterpret_cast<__m128i*>(out);
        _mm_stream_si128(o, _mm256_castsi256_si128(w0));
        _mm_stream_si128(o + 1, _mm256_extracti128_si256(w0, 1));
        _mm_stream_si128(o + 2, _mm256_castsi256_si128(w1));
        _mm_stream_si128(o + 3, _mm256_extracti128_si256(w1, 1));
      } else {
        _mm256_storeu_si256(out, w0);
        _mm256_storeu_si256(out + 1, w1);
      }
    }
    laneStep(lanes, w0, w1);
  }
  if (kStream) _mm_sfence();  // weakly ordered stores: published before returning
  laneFold(h, s0, steps, lanes);
}
#endif

#if defined(__x86_64__)
// dst = a + b over `steps` whole steps of floats, hashing b's words as stepsAvx2 does.
__attribute__((target("avx2"))) void addStepsAvx2(Sums& h, uint32_t s0, float* dst, const float* a,
                                                  const float* b, size_t steps) {
  LaneSums lanes = laneStart();
  for (size_t t = 0; t < steps; ++t) {
    const size_t e = t * kLanes;
    const __m256 y0 = _mm256_loadu_ps(b + e);
    const __m256 y1 = _mm256_loadu_ps(b + e + 8);
    _mm256_storeu_ps(dst + e, _mm256_add_ps(_mm256_loadu_ps(a + e), y0));
    _mm256_storeu_ps(dst + e + 8, _mm256_add_ps(_mm256_loadu_ps(a + e + 8), y1));
    laneStep(lanes, _mm256_castps_si256(y0), _mm256_castps_si256(y1));
  }
  laneFold(h, s0, steps, lanes);
}
#endif

#if defined(__x86_64__)
// dst = a + b over `steps` whole steps of 16-bit floats (32 per step), hashing b's words as
// stepsAvx2 does: b's step is loaded once as two vectors of words, and its halves again from
// the first-level cache for the conversions.
template <typename T>
XCCL_HALF_VECTOR void addHalfStepsAvx2(Sums& h, uint32_t s0, uint16_t* dst, const uint16_t* a,
                                       const uint16_t* b, size_t steps) {
  LaneSums lanes = laneStart();
  for (size_t t = 0; t < steps; ++t) {
    const size_t e = t * 2 * kLanes;
    const auto* in = reinterpret_cast<const __m256i*>(b + e);
    const __m256i w0 = _mm256_loadu_si256(in);
    const __m256i w1 = _mm256_loadu_si256(in + 1);
    for (size_t q = 0; q < 2 * kLanes; q += 16) {
      T::store2(dst + e + q, _mm256_add_ps(T::load(a + e + q), T::load(b + e + q)),
                _mm256_add_ps(T::load(a + e + q + 8), T::load(b + e + q + 8)));
    }
    laneStep(lanes, w0, w1);
  }
  laneFold(h, s0, steps, lanes);
}
#endif

// dst[i] = a[i] + b[i] for 16-bit floats, one rounding per element (half.h).
template <typename T>
void addHalvesScalar(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = fromFloat(toFloat(T{a[i]}) + toFloat(T{b[i]}), static_cast<T*>(nullptr)).bits;
  }
}

// The piece's cursor moved past k bytes.
template <bool kCopy>
void advance(size_t k, uint64_t& at, const unsigned char*& p, unsigned char*& dst, size_t& n) {
  at += k;
  p += k;
  if (kCopy) dst += k;
  n -= k;
}

// One word, or the part of it that is in the piece; the bytes it took.
template <bool kCopy>
size_t word(Sums& h, uint64_t at, unsigned char* dst, const unsigned char* p, size_t n) {
  const size_t from = at % 4;
  const size_t k = std::min<size_t>(4 - from, n);
  if (kCopy) std::memcpy(dst, p, k);
  addWord(h, at / 4, partialWord(p, from, k));
  return k;
}

template <bool kCopy>
uint64_t run(uint64_t h0, uint64_t at, unsigned char* dst, const unsigned char* p, size_t n,
             bool stream = false) {
  Sums h = unpack(h0);
  // The head: words up to the first step boundary.
  while (n > 0 && at % kStepBytes != 0) {
    advance<kCopy>(word<kCopy>(h, at, dst, p, n), at, p, dst, n);
  }
  if (n >= kStepBytes) {
    const size_t steps = n / kStepBytes;
    const auto s0 = static_cast<uint32_t>(at / kStepBytes);
#if defined(__x86_64__)
    if (sum64Vector()) {
      if (kCopy && stream && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
        stepsAvx2<kCopy, true>(h, s0, dst, p, steps);
      } else {
        stepsAvx2<kCopy, false>(h, s0, dst, p, steps);
      }
    } else {
      stepsScalar<kCopy>(h, s0, dst, p, steps);
    }
#else
    stepsScalar<kCopy>(h, s0, dst, p, steps);
#endif
    advance<kCopy>(steps * kStepBytes, at, p, dst, n);
  }
  while (n > 0) advance<kCopy>(word<kCopy>(h, at, dst, p, n), at, p, dst, n);  // the tail
  return pack(h);
}

std::atomic<bool> vectorAllowed{true};

}  // namespace

bool sum64Vector() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has && vectorAllowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void sum64AllowVector(bool allow) { vectorAllowed.store(allow); }

uint64_t sum64Extend(uint64_t h, uint64_t at, const void* p, size_t n) {
  return run<false>(h, at, nullptr, static_cast<const unsigned char*>(p), n);
}

uint64_t sum64Copy(uint64_t h, uint64_t at, void* dst, const void* src, size_t n, bool streaming) {
  return run<true>(h, at, static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src),
                   n, streaming);
}

uint64_t sum64AddFloats(uint64_t h0, uint64_t at, float* dst, const float* a, const float* b,
                        size_t count) {
  if (at % 4 != 0) {  // b not at a word boundary of its message: hash, then add
    h0 = sum64Extend(h0, at, b, count * sizeof(float));
    for (size_t i = 0; i < count; ++i) dst[i] = a[i] + b[i];
    return h0;
  }
  Sums h = unpack(h0);
  auto one = [&](size_t i) {
    uint32_t w;
    std::memcpy(&w, b + i, 4);
    addWord(h, at / 4 + i, w);
    dst[i] = a[i] + b[i];
  };
  size_t i = 0;
  for (; i < count && (at / 4 + i) % kLanes != 0; ++i) one(i);  // up to a step boundary
#if defined(__x86_64__)
  const size_t steps = (count - i) / kLanes;
  if (steps > 0 && sum64Vector()) {  // whole steps; the portable path takes them one by one
    addStepsAvx2(h, static_cast<uint32_t>((at / 4 + i) / kLanes), dst + i, a + i, b + i, steps);
    i += steps * kLanes;
  }
#endif
  for (; i < count; ++i) one(i);
  return pack(h);
}

uint64_t sum64AddHalves(uint64_t h0, uint64_t at, uint16_t* dst, const uint16_t* a,
                        const uint16_t* b, size_t count, bool bf16) {
  auto add = [bf16](uint16_t* d, const uint16_t* x, const uint16_t* y, size_t n) {
    if (bf16) {
      addHalvesScalar<BFloat16>(d, x, y, n);
    } else {
      addHalvesScalar<Half>(d, x, y, n);
    }
  };
  // The head: elements up to b's first step boundary (all of them when b is not at an even
  // offset of its message, or the vector loop cannot run here).
  size_t head = count;
#if defined(__x86_64__)
  if (at % 2 == 0 && sum64Vector() && halfvec::available()) {
    head = std::min(count, (kStepBytes - at % kStepBytes) % kStepBytes / 2);
  }
#endif
  h0 = sum64Extend(h0, at, b, head * 2);
  add(dst, a, b, head);
  size_t i = head;
#if defined(__x86_64__)
  const size_t steps = (count - i) / (2 * kLanes);
  if (steps > 0) {
    Sums h = unpack(h0);
    const auto s0 = static_cast<uint32_t>((at + 2 * i) / kStepBytes);
    if (bf16) {
      addHalfStepsAvx2<halfvec::BF16>(h, s0, dst + i, a + i, b + i, steps);
    } else {
      addHalfStepsAvx2<halfvec::F16>(h, s0, dst + i, a + i, b + i, steps);
    }
    h0 = pack(h);
    i += steps * 2 * kLanes;
  }
#endif
  h0 = sum64Extend(h0, at + 2 * i, b + i, (count - i) * 2);  // the tail
  add(dst + i, a + i, b + i, count - i);
  return h0;
}

uint64_t sum64Reference(uint64_t h0, uint64_t at, const void* p, size_t n) {
  Sums h = unpack(h0);
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t t = 0; t < n; ++t) {
    const uint64_t pos = at + t;
    addWord(h, pos / 4, static_cast<uint32_t>(b[t]) << (8 * (pos % 4)));
  }
  return pack(h);
}

}  // namespace xccl
