// xdev runtime: the reduction kernels queued on a stream (and their synchronous forms)
// against a scalar host reference, for every type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "test_dtype.h"
#include "test_xdev_util.h"

namespace {

// Small integer-valued inputs: every result below is exact in every type.
double input(int seed, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + seed * 3) % 11) - 5);
}

// Element access through the suites' shared helpers (the xdev dtype values are xccl's).
void put(void* p, size_t i, xdevDataType_t t, double v) {
  xccl_test::store(p, i, static_cast<xcclDataType_t>(t), v);
}
double get(const void* p, size_t i, xdevDataType_t t) {
  return xccl_test::load(p, i, static_cast<xcclDataType_t>(t));
}
size_t sizeOf(xdevDataType_t t) {
  static const size_t kBytes[xdevNumTypes] = {1, 1, 4, 8, 2, 4, 8, 2, 1, 1, 1, 2, 4, 8};
  return kBytes[t];
}

// The value `put` stores for v, read back (wrap-around for the 8-bit types, 0/1 for bool).
double stored(double v, xdevDataType_t t) {
  std::vector<char> cell(8);
  put(cell.data(), 0, t, v);
  return get(cell.data(), 0, t);
}

double reference(double a, double b, xdevRedOp_t op, xdevDataType_t t) {
  a = stored(a, t);
  b = stored(b, t);
  auto ia = static_cast<int64_t>(a), ib = static_cast<int64_t>(b);
  switch (op) {
    case xdevSum:
      return t == xdevBool ? (a != 0 || b != 0) : stored(a + b, t);
    case xdevProd:
      return t == xdevBool ? (a != 0 && b != 0) : stored(a * b, t);
    case xdevMax:
      return a > b ? a : b;
    case xdevMin:
      return a < b ? a : b;
    case xdevBand:
      return stored(static_cast<double>(ia & ib), t);
    case xdevBor:
      return stored(static_cast<double>(ia | ib), t);
    default:
      return stored(static_cast<double>(ia ^ ib), t);
  }
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(xdevSuccess, xdevMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { xdevFree(ptr); }
  void* ptr = nullptr;
};

TEST(XdevKernels, ReduceOnAStreamMatchesTheReference) {
  // uint32 and uint64: their wrapped values overflow this double reference (below, exact).
  const xdevDataType_t types[] = {xdevInt8,    xdevUint8,      xdevInt32,      xdevInt64,
                                  xdevFloat16, xdevFloat32,    xdevFloat64,    xdevBfloat16,
                                  xdevBool,    xdevFloat8e4m3, xdevFloat8e5m2, xdevUint16};
  const xdevRedOp_t ops[] = {xdevSum, xdevProd, xdevMax, xdevMin, xdevBand, xdevBor, xdevBxor};
  const size_t n = 1031;  // odd: no vector width divides it
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  for (auto t : types) {
    const bool isFloat = t == xdevFloat16 || t == xdevFloat32 || t == xdevFloat64 ||
                         t == xdevBfloat16 || t == xdevFloat8e4m3 || t == xdevFloat8e5m2;
    const size_t bytes = n * sizeOf(t);
    DeviceBuffer a(bytes), b(bytes), d(bytes);
    std::vector<char> ha(bytes), hb(bytes), out(bytes);
    for (size_t i = 0; i < n; ++i) {
      put(ha.data(), i, t, input(1, i));
      put(hb.data(), i, t, input(2, i));
    }
    XDEV_ASSERT_OK(xdevMemcpyAsync(a.ptr, ha.data(), bytes, xdevMemcpyHostToDevice, s));
    XDEV_ASSERT_OK(xdevMemcpyAsync(b.ptr, hb.data(), bytes, xdevMemcpyHostToDevice, s));
    for (auto op : ops) {
      if (isFloat && (op == xdevBand || op == xdevBor || op == xdevBxor)) {
        EXPECT_EQ(xdevErrorInvalidValue, xdevReduceAsync(d.ptr, a.ptr, b.ptr, n, t, op, s));
        continue;
      }
      XDEV_ASSERT_OK(xdevMemsetAsync(d.ptr, 0x5a, bytes, s));
      XDEV_ASSERT_OK(xdevReduceAsync(d.ptr, a.ptr, b.ptr, n, t, op, s));
      XDEV_ASSERT_OK(xdevMemcpyAsync(out.data(), d.ptr, bytes, xdevMemcpyDeviceToHost, s));
      XDEV_ASSERT_OK(xdevStreamSynchronize(s));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(get(out.data(), i, t), reference(input(1, i), input(2, i), op, t))
            << "type " << t << " op " << op << " at " << i;
      }
    }
  }
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

// xdevReduceCopy: the rank-order fold of 1 to 3 sources stored to 1 or 3 destinations, against
// xdevReduce applied in the same order, for every type and op, at an odd size and at one large
// enough for streaming stores (>= 4 MiB for the 4- and 8-byte types), with a destination that
// is a source (in place), one that is not, and one not 16-byte aligned.
TEST(XdevKernels, ReduceCopyIsTheFoldStoredEverywhere) {
  const xdevDataType_t types[] = {xdevInt8,    xdevUint8,      xdevInt32,      xdevInt64,
                                  xdevFloat16, xdevFloat32,    xdevFloat64,    xdevBfloat16,
                                  xdevBool,    xdevFloat8e4m3, xdevFloat8e5m2, xdevUint16,
                                  xdevUint32,  xdevUint64};
  const xdevRedOp_t ops[] = {xdevSum, xdevProd, xdevMax, xdevMin, xdevBand, xdevBor, xdevBxor};
  for (auto t : types) {
    const bool isFloat = t == xdevFloat16 || t == xdevFloat32 || t == xdevFloat64 ||
                         t == xdevBfloat16 || t == xdevFloat8e4m3 || t == xdevFloat8e5m2;
    for (size_t n : {size_t(1031), (size_t(1) << 20) + 33}) {
      const size_t es = sizeOf(t), bytes = n * es;
      std::vector<std::vector<char>> in(3, std::vector<char>(bytes));
      for (int k = 0; k < 3; ++k) {
        for (size_t i = 0; i < n; ++i) put(in[k].data(), i, t, input(k + 1, i));
      }
      for (auto op : ops) {
        if (isFloat && (op == xdevBand || op == xdevBor || op == xdevBxor)) continue;
        for (int ns = 1; ns <= 3; ++ns) {
          std::vector<char> want(in[0]);
          for (int k = 1; k < ns; ++k) {
            XDEV_ASSERT_OK(xdevReduce(want.data(), want.data(), in[k].data(), n, t, op));
          }
          std::vector<char> src0(in[0]), plain(bytes + 64, 0x5a), odd(bytes + 16, 0x5a);
          const void* srcs[3] = {src0.data(), in[1].data(), in[2].data()};
          // 64-byte aligned (streaming stores when large), 4 bytes off, and in place.
          char* aligned = plain.data() + (64 - reinterpret_cast<uintptr_t>(plain.data()) % 64) % 64;
          void* dsts[3] = {aligned, odd.data() + 4, src0.data()};
          XDEV_ASSERT_OK(xdevReduceCopy(dsts, 3, srcs, ns, n, t, op));
          for (int k = 0; k < 3; ++k) {
            ASSERT_EQ(0, std::memcmp(dsts[k], want.data(), bytes))
                << "type " << t << " op " << op << " n " << n << " sources " << ns << " dst " << k;
          }
          std::vector<char> one(bytes);
          void* only[1] = {one.data()};
          XDEV_ASSERT_OK(xdevReduceCopy(only, 1, srcs + 1, 1, n, t, op));  // a copy
          ASSERT_EQ(0, std::memcmp(one.data(), in[1].data(), bytes)) << "type " << t;
        }
      }
    }
  }
  float f[4] = {1, 2, 3, 4};
  void* d[1] = {f};
  const void* s1[1] = {f};
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduceCopy(d, 0, s1, 1, 4, xdevFloat32, xdevSum));
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduceCopy(d, 1, s1, 0, 4, xdevFloat32, xdevSum));
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduceCopy(d, 1, s1, 1, 4, xdevFloat32, xdevBand));
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduceCopy(nullptr, 1, s1, 1, 4, xdevFloat32, xdevSum));
}

TEST(XdevKernels, ScaleThenDivideOnAStreamRoundTrips) {
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  for (auto t : {xdevInt32, xdevInt64, xdevFloat16, xdevBfloat16, xdevFloat32, xdevFloat64}) {
    const size_t n = 77, bytes = n * sizeOf(t);
    DeviceBuffer src(bytes), dst(bytes);
    std::vector<char> h(bytes), out(bytes), scalar(8);
    for (size_t i = 0; i < n; ++i) put(h.data(), i, t, input(0, i));
    put(scalar.data(), 0, t, 3);
    XDEV_ASSERT_OK(xdevMemcpyAsync(src.ptr, h.data(), bytes, xdevMemcpyHostToDevice, s));
    XDEV_ASSERT_OK(xdevScaleAsync(dst.ptr, src.ptr, n, t, scalar.data(), s));
    put(scalar.data(), 0, t, 1000);  // the scalar was read at the call: this changes nothing
    XDEV_ASSERT_OK(xdevMemcpyAsync(out.data(), dst.ptr, bytes, xdevMemcpyDeviceToHost, s));
    XDEV_ASSERT_OK(xdevStreamSynchronize(s));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(get(out.data(), i, t), input(0, i) * 3) << t << " " << i;
    }
    XDEV_ASSERT_OK(xdevDivideAsync(dst.ptr, n, t, 3, s));
    XDEV_ASSERT_OK(xdevMemcpyAsync(out.data(), dst.ptr, bytes, xdevMemcpyDeviceToHost, s));
    XDEV_ASSERT_OK(xdevStreamSynchronize(s));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(get(out.data(), i, t), input(0, i)) << t << " " << i;
  }
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevKernels, AverageBuiltFromSumAndDivideOrderedOnOneStream) {
  // avg = (a + b + c) / 3 as an allreduce would build it, all queued before any runs.
  const size_t n = 4096;
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  xdev_test::Gate gate;
  XDEV_ASSERT_OK(gate.blockStream(s));  // nothing runs until everything is queued
  std::vector<float> a(n), b(n), c(n), out(n, -1);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 2.f * i;
    c[i] = 3.f * i;
  }
  DeviceBuffer acc(n * 4), tmp(n * 4);
  XDEV_ASSERT_OK(xdevMemcpyAsync(acc.ptr, a.data(), n * 4, xdevMemcpyHostToDevice, s));
  for (auto* in : {&b, &c}) {
    XDEV_ASSERT_OK(xdevMemcpyAsync(tmp.ptr, in->data(), n * 4, xdevMemcpyHostToDevice, s));
    XDEV_ASSERT_OK(xdevReduceAsync(acc.ptr, acc.ptr, tmp.ptr, n, xdevFloat32, xdevSum, s));
  }
  XDEV_ASSERT_OK(xdevDivideAsync(acc.ptr, n, xdevFloat32, 3, s));
  XDEV_ASSERT_OK(xdevMemcpyAsync(out.data(), acc.ptr, n * 4, xdevMemcpyDeviceToHost, s));
  gate.open();
  XDEV_ASSERT_OK(xdevStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.f * i) << i;
  XDEV_ASSERT_OK(xdevStreamDestroy(s));
}

TEST(XdevKernels, BadArgumentsAreRejectedAtTheCall) {
  float f[4] = {1, 2, 3, 4};
  int32_t scalar = 2;
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduceAsync(f, f, f, 4, xdevFloat32, xdevBand, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduceAsync(f, f, f, 4, xdevFloat32, xdevAvg, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue,
            xdevReduceAsync(f, f, f, 4, static_cast<xdevDataType_t>(42), xdevSum, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue,
            xdevReduceAsync(f, nullptr, f, 4, xdevFloat32, xdevSum, nullptr));
  XDEV_EXPECT_OK(xdevReduceAsync(nullptr, nullptr, nullptr, 0, xdevFloat32, xdevSum, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevScaleAsync(f, f, 4, xdevBool, &scalar, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevScaleAsync(f, f, 4, xdevInt32, nullptr, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevDivideAsync(f, 4, xdevFloat32, 0, nullptr));
  EXPECT_EQ(xdevErrorInvalidValue, xdevDivideAsync(f, 4, xdevBool, 2, nullptr));
  auto bogus = reinterpret_cast<xdevStream_t>(uintptr_t{0xdead});
  EXPECT_EQ(xdevErrorInvalidResourceHandle,
            xdevReduceAsync(f, f, f, 4, xdevFloat32, xdevSum, bogus));
  XDEV_ASSERT_OK(xdevStreamSynchronize(nullptr));
  EXPECT_EQ(f[0], 1.f) << "nothing rejected ran";
  EXPECT_EQ(xdevErrorInvalidValue, xdevReduce(f, f, f, 4, xdevFloat64, xdevBxor));
  EXPECT_EQ(xdevErrorInvalidValue, xdevDivide(f, 4, xdevFloat32, 0));
}

TEST(XdevKernels, SynchronousFormsRunOnTheCaller) {
  int64_t a[3] = {1, -2, 3}, b[3] = {4, 5, -6}, d[3];
  XDEV_ASSERT_OK(xdevReduce(d, a, b, 3, xdevInt64, xdevMax));
  EXPECT_EQ(d[0], 4);
  EXPECT_EQ(d[1], 5);
  EXPECT_EQ(d[2], 3);
  int64_t k = -2;
  XDEV_ASSERT_OK(xdevScale(d, d, 3, xdevInt64, &k));
  EXPECT_EQ(d[2], -6);
  XDEV_ASSERT_OK(xdevDivide(d, 3, xdevInt64, -2));
  EXPECT_EQ(d[0], 4);
  EXPECT_EQ(d[2], 3);
}

// uint32 and uint64 wrap modulo 2^bits in every op, checked in integers.
TEST(XdevKernels, WideUnsignedTypesWrapExactly) {
  const size_t n = 515;
  std::vector<uint64_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0xfffffffffffffff0ull - i * 0x9e3779b97f4a7c15ull;
    b[i] = i * 0x9e3779b97f4a7c15ull + 77;
  }
  const xdevRedOp_t ops[] = {xdevSum, xdevProd, xdevMax, xdevMin, xdevBand, xdevBor, xdevBxor};
  for (int wide = 0; wide < 2; ++wide) {
    for (auto op : ops) {
      std::vector<uint64_t> d64(n);
      std::vector<uint32_t> a32(n), b32(n), d32(n);
      for (size_t i = 0; i < n; ++i) {
        a32[i] = static_cast<uint32_t>(a[i]);
        b32[i] = static_cast<uint32_t>(b[i] >> 7);
      }
      if (wide) {
        XDEV_ASSERT_OK(xdevReduce(d64.data(), a.data(), b.data(), n, xdevUint64, op));
      } else {
        XDEV_ASSERT_OK(xdevReduce(d32.data(), a32.data(), b32.data(), n, xdevUint32, op));
      }
      for (size_t i = 0; i < n; ++i) {
        auto ref = [&](auto x, auto y) -> decltype(x) {
          switch (op) {
            case xdevSum:
              return x + y;
            case xdevProd:
              return x * y;
            case xdevMax:
              return x < y ? y : x;
            case xdevMin:
              return y < x ? y : x;
            case xdevBand:
              return x & y;
            case xdevBor:
              return x | y;
            default:
              return x ^ y;
          }
        };
        if (wide) {
          ASSERT_EQ(d64[i], ref(a[i], b[i])) << "uint64 op " << op << " at " << i;
        } else {
          ASSERT_EQ(d32[i], static_cast<uint32_t>(ref(a32[i], b32[i]))) << "uint32 op " << op;
        }
      }
    }
  }
}

// FP8 from float as torch 2.13's .to() converts (measured): nearest even, e4m3fn saturates
// at 448, e5m2 overflows to infinity; every code survives a round trip through float.
TEST(XdevKernels, Float8ConversionsMatchTorchs) {
  using xccl::Float8E4M3;
  using xccl::Float8E5M2;
  auto e4 = [](float x) { return xccl::fromFloat(x, static_cast<Float8E4M3*>(nullptr)).bits; };
  auto e5 = [](float x) { return xccl::fromFloat(x, static_cast<Float8E5M2*>(nullptr)).bits; };
  EXPECT_EQ(e4(1.0f), 0x38);
  EXPECT_EQ(e4(-2.0f), 0xc0);
  EXPECT_EQ(e4(448.0f), 0x7e);
  EXPECT_EQ(e4(464.0f), 0x7e);  // the tie rounds to the even 448
  EXPECT_EQ(e4(465.0f), 0x7e);  // past it: saturates (no infinity in e4m3fn)
  EXPECT_EQ(e4(1e9f), 0x7e);
  EXPECT_EQ(e4(-INFINITY), 0xfe);
  EXPECT_EQ(e4(NAN), 0x7f);
  EXPECT_EQ(e4(0x1p-9f), 0x01);   // the smallest subnormal
  EXPECT_EQ(e4(0x1p-10f), 0x00);  // half of it: the tie rounds to even, zero
  EXPECT_EQ(e4(0x1.8p-9f), 0x02);
  EXPECT_EQ(e4(-0.0f), 0x80);
  EXPECT_EQ(e4(0.0625f), 0x18);    // 2^-4: exponent field 3
  EXPECT_EQ(e4(0x1.ep-7f), 0x08);  // rounds up out of the subnormals into 2^-6
  EXPECT_EQ(e5(1.0f), 0x3c);
  EXPECT_EQ(e5(57344.0f), 0x7b);
  EXPECT_EQ(e5(61440.0f), 0x7c);  // the tie rounds to even: infinity
  EXPECT_EQ(e5(60000.0f), 0x7b);
  EXPECT_EQ(e5(1e9f), 0x7c);
  EXPECT_EQ(e5(-INFINITY), 0xfc);
  EXPECT_EQ(e5(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(e5(0x1p-16f), 0x01);
  EXPECT_EQ(e5(0x1p-17f), 0x00);
  for (int c = 0; c < 256; ++c) {
    const float f4 = xccl::toFloat(Float8E4M3{static_cast<uint8_t>(c)});
    const float f5 = xccl::toFloat(Float8E5M2{static_cast<uint8_t>(c)});
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f4)) << c;
    } else {
      EXPECT_EQ(e4(f4), c) << "e4m3 code " << c << " = " << f4;
    }
    if ((c & 0x7c) == 0x7c && (c & 3) != 0) {
      EXPECT_TRUE(std::isnan(f5)) << c;
    } else {
      EXPECT_EQ(e5(f5), c) << "e5m2 code " << c << " = " << f5;
    }
  }
}

}  // namespace
