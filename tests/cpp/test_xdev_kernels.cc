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
  static const size_t kBytes[xdevNumTypes] = {1, 1, 4, 8, 2, 4, 8, 2, 1};
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
  const xdevDataType_t types[] = {xdevInt8,    xdevUint8,   xdevInt32,    xdevInt64, xdevFloat16,
                                  xdevFloat32, xdevFloat64, xdevBfloat16, xdevBool};
  const xdevRedOp_t ops[] = {xdevSum, xdevProd, xdevMax, xdevMin, xdevBand, xdevBor, xdevBxor};
  const size_t n = 1031;  // odd: no vector width divides it
  xdevStream_t s;
  XDEV_ASSERT_OK(xdevStreamCreate(&s));
  for (auto t : types) {
    const bool isFloat =
        t == xdevFloat16 || t == xdevFloat32 || t == xdevFloat64 || t == xdevBfloat16;
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

}  // namespace
