// Device seam: the host device's kernels against a scalar reference, for every dtype x op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "collectives/device/device.h"
#include "collectives/device/dtype.h"
#include "common/error.h"
#include "test_dtype.h"

namespace {

using xccl::getDevice;

// Reference value of element i for an input "seed", as a double, kept small so sums and
// products are exact in every type.
double value(int seed, size_t i, xcclDataType_t t) {
  if (t == xcclBool) return (i + seed) % 3 == 0;
  if (t == xcclUint8) return static_cast<double>((i * 7 + seed * 3) % 11);
  return static_cast<double>(static_cast<int>((i * 7 + seed * 3) % 11) - 5);
}

using xccl_test::load;
using xccl_test::store;

double refOp(double a, double b, xcclRedOp_t op, xcclDataType_t t) {
  if (t == xcclBool) {
    bool x = a != 0, y = b != 0;
    switch (op) {
      case xcclSum:
      case xcclMax:
      case xcclBor:
        return x || y;
      case xcclProd:
      case xcclMin:
      case xcclBand:
        return x && y;
      case xcclBxor:
        return x != y;
      default:
        return NAN;
    }
  }
  auto ia = static_cast<int64_t>(a), ib = static_cast<int64_t>(b);
  switch (op) {
    case xcclSum:
      return a + b;
    case xcclProd:
      return a * b;
    case xcclMax:
      return a > b ? a : b;
    case xcclMin:
      return a < b ? a : b;
    case xcclBand:
      return static_cast<double>(ia & ib);
    case xcclBor:
      return static_cast<double>(ia | ib);
    case xcclBxor:
      return static_cast<double>(ia ^ ib);
    default:
      return NAN;
  }
}

const xcclDataType_t kTypes[] = {xcclInt8,    xcclUint8,   xcclInt32,    xcclInt64, xcclFloat16,
                                 xcclFloat32, xcclFloat64, xcclBfloat16, xcclBool};
const xcclRedOp_t kElemOps[] = {xcclSum, xcclProd, xcclMax, xcclMin, xcclBand, xcclBor, xcclBxor};

TEST(HostDevice, ReduceEveryTypeAndOpMatchesReference) {
  auto& dev = getDevice(-1);
  const size_t n = 1031;  // odd, not a multiple of any vector width
  for (auto t : kTypes) {
    for (auto op : kElemOps) {
      if (!xccl::opSupported(t, op)) continue;
      size_t es = xccl::dtypeSize(t);
      std::vector<char> a(n * es), b(n * es), d(n * es);
      for (size_t i = 0; i < n; ++i) {
        store(a.data(), i, t, value(1, i, t));
        store(b.data(), i, t, value(2, i, t));
      }
      dev.reduce(d.data(), a.data(), b.data(), n, t, op);
      for (size_t i = 0; i < n; ++i) {
        double want = refOp(value(1, i, t), value(2, i, t), op, t);
        if (t == xcclUint8 || t == xcclInt8) {  // wrap-around like the hardware type
          want = t == xcclUint8 ? static_cast<uint8_t>(static_cast<int64_t>(want))
                                : static_cast<int8_t>(static_cast<int64_t>(want));
        }
        ASSERT_EQ(load(d.data(), i, t), want)
            << xcclTypeName(t) << " " << xcclOpName(op) << " at " << i;
      }
      // In place (dst == a) gives the same.
      dev.reduce(a.data(), a.data(), b.data(), n, t, op);
      ASSERT_EQ(0, std::memcmp(a.data(), d.data(), n * es)) << xcclTypeName(t) << xcclOpName(op);
    }
  }
}

TEST(HostDevice, HalfTypesAccumulateInFloat32AndRoundOnce) {
  auto& dev = getDevice(-1);
  // 2048 + 1 is not representable in fp16 (spacing 2 at 2048): round to nearest even -> 2048.
  xccl::Half a = xccl::fromFloat(2048.f, (xccl::Half*)0), b = xccl::fromFloat(1.f, (xccl::Half*)0);
  xccl::Half d;
  dev.reduce(&d, &a, &b, 1, xcclFloat16, xcclSum);
  EXPECT_EQ(xccl::toFloat(d), 2048.f);
  xccl::Half three = xccl::fromFloat(3.f, (xccl::Half*)0);
  dev.reduce(&d, &a, &three, 1, xcclFloat16, xcclSum);
  EXPECT_EQ(xccl::toFloat(d), 2052.f);  // 2051 -> nearest even 2052
  // bfloat16 keeps the float exponent range: 1e30 * 2 does not overflow.
  xccl::BFloat16 x = xccl::fromFloat(1e30f, (xccl::BFloat16*)0),
                 two = xccl::fromFloat(2.f, (xccl::BFloat16*)0), y;
  dev.reduce(&y, &x, &two, 1, xcclBfloat16, xcclProd);
  EXPECT_NEAR(xccl::toFloat(y), 2e30f, 2e30f * 0.01f);
}

TEST(HostDevice, ScaleAndDivide) {
  auto& dev = getDevice(-1);
  for (auto t : kTypes) {
    if (t == xcclBool) continue;
    size_t es = xccl::dtypeSize(t);
    const size_t n = 33;
    std::vector<char> src(n * es), dst(n * es), scalar(8);
    for (size_t i = 0; i < n; ++i) store(src.data(), i, t, value(0, i, t));
    store(scalar.data(), 0, t, 3);
    dev.scale(dst.data(), src.data(), n, t, scalar.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(load(dst.data(), i, t), load(src.data(), i, t) * 3) << xcclTypeName(t) << " " << i;
    }
    dev.divide(dst.data(), n, t, 3);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(load(dst.data(), i, t), load(src.data(), i, t)) << xcclTypeName(t) << " " << i;
    }
  }
}

TEST(HostDevice, SupportMatrix) {
  EXPECT_FALSE(xccl::opSupported(xcclFloat32, xcclBand));
  EXPECT_FALSE(xccl::opSupported(xcclBfloat16, xcclBxor));
  EXPECT_TRUE(xccl::opSupported(xcclInt32, xcclBxor));
  EXPECT_FALSE(xccl::opSupported(xcclBool, xcclAvg));
  EXPECT_TRUE(xccl::opSupported(xcclBool, xcclBor));
  EXPECT_FALSE(xccl::opSupported(static_cast<xcclDataType_t>(99), xcclSum));
  auto& dev = getDevice(-1);
  float f[2] = {1, 2};
  EXPECT_THROW(dev.reduce(f, f, f, 2, xcclFloat32, xcclBand), xccl::InvalidUsage);
  EXPECT_THROW(dev.reduce(f, f, f, 2, xcclFloat32, xcclAvg), xccl::InvalidUsage);
}

TEST(HostDevice, CopyAndAllocation) {
  auto& dev = getDevice(-1);
  EXPECT_STREQ(dev.name(), "host");
  char* p = static_cast<char*>(dev.alloc(1000));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::vector<char> src(1000);
  for (int i = 0; i < 1000; ++i) src[i] = static_cast<char>(i);
  dev.copy(p, src.data(), 1000, xccl::CopyKind::kDeviceToStaging);
  EXPECT_EQ(0, std::memcmp(p, src.data(), 1000));
  dev.copy(p, p, 1000, xccl::CopyKind::kDeviceToDevice);  // self copy is a no-op
  EXPECT_EQ(0, std::memcmp(p, src.data(), 1000));
  dev.free(p);
}

TEST(HostDevice, StreamingCopyMatchesMemcpyAtEveryAlignmentAndSize) {
  auto& dev = getDevice(-1);
  std::vector<unsigned char> src(70000), dst(70100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t dstOff : {0, 1, 8, 15, 16, 33}) {
    for (size_t srcOff : {0, 3, 16}) {
      for (size_t n : {0, 1, 63, 4095, 4096, 4097, 65536 + 17}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        dev.copy(dst.data() + dstOff, src.data() + srcOff, n,
                 xccl::CopyKind::kStagingToDeviceNoReuse);
        ASSERT_EQ(0, std::memcmp(dst.data() + dstOff, src.data() + srcOff, n))
            << "dstOff " << dstOff << " srcOff " << srcOff << " n " << n;
        for (size_t i = 0; i < dstOff; ++i) ASSERT_EQ(dst[i], 0xEE) << "wrote before dst";
        ASSERT_EQ(dst[dstOff + n], 0xEE) << "wrote past the end, n " << n;
      }
    }
  }
}

TEST(HostDevice, UnknownDeviceKindIsAClearError) {
  setenv("XCCL_DEVICE", "quantum", 1);
  try {
    getDevice(0);
    ADD_FAILURE() << "expected an error";
  } catch (const xccl::InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("quantum"), std::string::npos) << e.what();
  }
  unsetenv("XCCL_DEVICE");
}

}  // namespace
