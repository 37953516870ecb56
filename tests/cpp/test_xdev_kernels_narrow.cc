// xdev runtime: the 16- and 8-bit floating kernels (vector loops where the CPU has AVX2 and
// F16C, kernels_vector.h) against a scalar definition built here from common/half.h, bit for
// bit, on every float16 and bfloat16 value and every pair of FP8 values: normals,
// subnormals, zeros, infinities and NaNs, with
// results that round, overflow and underflow (of two NaN operands, any NaN may come out). The
// counts are not multiples of eight, so the portable tail runs after the vector body.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "common/half.h"
#include "test_xdev_util.h"

namespace {

using xccl::BFloat16;
using xccl::Float8E4M3;
using xccl::Float8E5M2;
using xccl::Half;

template <typename T>
float widen(decltype(T::bits) bits) {
  return xccl::toFloat(T{bits});
}
template <typename T>
decltype(T::bits) narrow(float x) {
  return xccl::fromFloat(x, static_cast<T*>(nullptr)).bits;
}

float apply(float a, float b, xdevRedOp_t op) {
  switch (op) {
    case xdevSum:
      return a + b;
    case xdevProd:
      return a * b;
    case xdevMax:
      return a < b ? b : a;
    default:
      return b < a ? b : a;
  }
}

// Every 16-bit pattern, then three more (the tail).
std::vector<uint16_t> everyPattern() {
  std::vector<uint16_t> v(65536 + 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i * 40503u);
  return v;
}

// Second operands that make the first round, overflow, cancel, and meet NaNs and zeros.
template <typename T>
std::vector<uint16_t> partners() {
  std::vector<uint16_t> p;
  for (float f : {0.0f, -0.0f, 1.0f, -1.5f, 3.0e-3f, 1.0e-7f, 6.0e4f, -6.5e4f, 1.0e30f, INFINITY,
                  -INFINITY, NAN}) {
    p.push_back(narrow<T>(f));
  }
  p.push_back(0x0001);  // the smallest subnormal
  p.push_back(0x8001);
  p.push_back(0x7c01);  // a signalling NaN in float16 (in bfloat16: a large normal)
  p.push_back(0xff81);  // a bfloat16 signalling NaN (in float16: a quiet one)
  return p;
}

std::string hex(uint16_t v) {
  char s[8];
  std::snprintf(s, sizeof s, "%04x", v);
  return s;
}

template <typename T>
void checkReduce(xdevDataType_t dtype) {
  const std::vector<uint16_t> a = everyPattern();
  const size_t n = a.size();
  std::vector<uint16_t> b(n), out(n);
  for (uint16_t partner : partners<T>()) {
    for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint16_t>(partner + (i % 3 == 0 ? i : 0));
    for (xdevRedOp_t op : {xdevSum, xdevProd, xdevMax, xdevMin}) {
      XDEV_ASSERT_OK(xdevReduce(out.data(), a.data(), b.data(), n, dtype, op));
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) {
        const float x = widen<T>(a[i]), y = widen<T>(b[i]);
        const uint16_t want = narrow<T>(apply(x, y, op));
        // Of two NaNs, which one's payload comes out depends on the order the compiler gave
        // the operands (x86 returns the first): only a NaN is required then.
        const bool same =
            std::isnan(x) && std::isnan(y) ? std::isnan(widen<T>(out[i])) : out[i] == want;
        if (!same && ++wrong <= 3) {
          ADD_FAILURE() << "type " << dtype << " op " << op << " element " << i << ": " << hex(a[i])
                        << " with " << hex(b[i]) << " gave " << hex(out[i]) << ", want "
                        << hex(want);
        }
      }
      EXPECT_EQ(wrong, 0u) << "type " << dtype << " op " << op << " partner " << hex(partner);
    }
  }
}

// xdevScale by each scalar and xdevDivide by each divisor on the values `a`, against the
// scalar definition bit for bit.
template <typename T, typename E = decltype(T::bits)>
void checkScaleAndDivideOn(const std::vector<E>& a, xdevDataType_t dtype,
                           std::initializer_list<float> scalars) {
  const size_t n = a.size();
  std::vector<E> out(n);
  for (float s : scalars) {
    const E scalar = narrow<T>(s);
    XDEV_ASSERT_OK(xdevScale(out.data(), a.data(), n, dtype, &scalar));
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      wrong += out[i] != narrow<T>(widen<T>(a[i]) * widen<T>(scalar));
    }
    EXPECT_EQ(wrong, 0u) << "scale, type " << dtype << " by " << s;
  }
  for (int64_t divisor : {3, -8, 1000003}) {
    out = a;
    XDEV_ASSERT_OK(xdevDivide(out.data(), n, dtype, divisor));
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      wrong += out[i] != narrow<T>(widen<T>(a[i]) / static_cast<float>(divisor));
    }
    EXPECT_EQ(wrong, 0u) << "divide, type " << dtype << " by " << divisor;
  }
}

template <typename T>
void checkScaleAndDivide(xdevDataType_t dtype) {
  checkScaleAndDivideOn<T>(everyPattern(), dtype, {0.5f, 3.0f, -1.0e-3f, 7.0e4f});
}

// FP8: every pair of codes (a = i % 256, b = i / 256), three more for the tail; the scale
// and the divide on every code with scalars that round, saturate and overflow.
template <typename T>
void checkFp8(xdevDataType_t dtype) {
  const size_t n = 65536 + 3;
  std::vector<uint8_t> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<uint8_t>(i % 256);
    b[i] = static_cast<uint8_t>(i / 256 % 256);
  }
  for (xdevRedOp_t op : {xdevSum, xdevProd, xdevMax, xdevMin}) {
    XDEV_ASSERT_OK(xdevReduce(out.data(), a.data(), b.data(), n, dtype, op));
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      const float x = widen<T>(a[i]), y = widen<T>(b[i]);
      const bool same = std::isnan(x) && std::isnan(y) ? std::isnan(widen<T>(out[i]))
                                                       : out[i] == narrow<T>(apply(x, y, op));
      if (!same && ++wrong <= 3) {
        ADD_FAILURE() << "type " << dtype << " op " << op << ": " << int{a[i]} << " with "
                      << int{b[i]} << " gave " << int{out[i]};
      }
    }
    EXPECT_EQ(wrong, 0u) << "type " << dtype << " op " << op;
  }
  checkScaleAndDivideOn<T>(a, dtype, {0.5f, 3.0f, -1.0e-3f, 300.0f, 7.0e4f, INFINITY});
}

TEST(XdevKernelsNarrow, Float8E4m3MatchesTheScalarDefinitionOnEveryPair) {
  checkFp8<Float8E4M3>(xdevFloat8e4m3);
}

TEST(XdevKernelsNarrow, Float8E5m2MatchesTheScalarDefinitionOnEveryPair) {
  checkFp8<Float8E5M2>(xdevFloat8e5m2);
}

TEST(XdevKernelsNarrow, Float16ReductionsMatchTheScalarDefinitionOnEveryValue) {
  checkReduce<Half>(xdevFloat16);
}

TEST(XdevKernelsNarrow, Bfloat16ReductionsMatchTheScalarDefinitionOnEveryValue) {
  checkReduce<BFloat16>(xdevBfloat16);
}

TEST(XdevKernelsNarrow, ScaleAndDivideMatchTheScalarDefinitionOnEveryValue) {
  checkScaleAndDivide<Half>(xdevFloat16);
  checkScaleAndDivide<BFloat16>(xdevBfloat16);
}

// Short and unaligned runs: the vector body's edges.
TEST(XdevKernelsNarrow, EveryLengthAndOffsetUpToThreeVectors) {
  std::vector<uint16_t> a(40), b(40), out(40);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = narrow<Half>(static_cast<float>(i) * 0.37f - 5.0f);
    b[i] = narrow<Half>(static_cast<float>(i) * -1.1f + 2.0f);
  }
  for (size_t off = 0; off < 8; ++off) {
    for (size_t len = 0; off + len <= 32; ++len) {
      std::fill(out.begin(), out.end(), 0xabcd);
      XDEV_ASSERT_OK(
          xdevReduce(out.data() + off, a.data() + off, b.data() + off, len, xdevFloat16, xdevSum));
      for (size_t i = 0; i < out.size(); ++i) {
        const bool inside = i >= off && i < off + len;
        const uint16_t want =
            inside ? narrow<Half>(widen<Half>(a[i]) + widen<Half>(b[i])) : uint16_t{0xabcd};
        ASSERT_EQ(out[i], want) << "offset " << off << " length " << len << " element " << i;
      }
    }
  }
}

}  // namespace
