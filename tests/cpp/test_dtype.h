// Element access by dtype for tests: store(buf, i, t, v) writes element i of a buffer of
// type t from a double (integers wrap like a C cast through int64, bool is v != 0, the
// 16- and 8-bit floats round to nearest even); load reads it back as a double (uint64 values
// past 2^53 lose bits).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/device/dtype.h"
#include "xccl.h"

namespace xccl_test {

inline void store(void* buf, size_t i, xcclDataType_t t, double v) {
  auto* p = static_cast<char*>(buf);
  switch (t) {
    case xcclInt8:
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case xcclUint8:
      reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case xcclBool:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0;
      break;
    case xcclInt32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(static_cast<int64_t>(v));
      break;
    case xcclInt64:
      reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case xcclFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case xcclFloat64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
    case xcclFloat16:
      reinterpret_cast<xccl::Half*>(p)[i] =
          xccl::fromFloat(static_cast<float>(v), static_cast<xccl::Half*>(nullptr));
      break;
    case xcclBfloat16:
      reinterpret_cast<xccl::BFloat16*>(p)[i] =
          xccl::fromFloat(static_cast<float>(v), static_cast<xccl::BFloat16*>(nullptr));
      break;
    case xcclFloat8e4m3:
      reinterpret_cast<xccl::Float8E4M3*>(p)[i] =
          xccl::fromFloat(static_cast<float>(v), static_cast<xccl::Float8E4M3*>(nullptr));
      break;
    case xcclFloat8e5m2:
      reinterpret_cast<xccl::Float8E5M2*>(p)[i] =
          xccl::fromFloat(static_cast<float>(v), static_cast<xccl::Float8E5M2*>(nullptr));
      break;
    case xcclUint16:
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(static_cast<int64_t>(v));
      break;
    case xcclUint32:
      reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(static_cast<int64_t>(v));
      break;
    case xcclUint64:
      reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(static_cast<int64_t>(v));
      break;
    default:
      break;
  }
}

inline double load(const void* buf, size_t i, xcclDataType_t t) {
  auto* p = static_cast<const char*>(buf);
  switch (t) {
    case xcclInt8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case xcclUint8:
    case xcclBool:
      return reinterpret_cast<const uint8_t*>(p)[i];
    case xcclInt32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case xcclInt64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case xcclFloat32:
      return reinterpret_cast<const float*>(p)[i];
    case xcclFloat64:
      return reinterpret_cast<const double*>(p)[i];
    case xcclFloat16:
      return xccl::toFloat(reinterpret_cast<const xccl::Half*>(p)[i]);
    case xcclBfloat16:
      return xccl::toFloat(reinterpret_cast<const xccl::BFloat16*>(p)[i]);
    case xcclFloat8e4m3:
      return xccl::toFloat(reinterpret_cast<const xccl::Float8E4M3*>(p)[i]);
    case xcclFloat8e5m2:
      return xccl::toFloat(reinterpret_cast<const xccl::Float8E5M2*>(p)[i]);
    case xcclUint16:
      return reinterpret_cast<const uint16_t*>(p)[i];
    case xcclUint32:
      return reinterpret_cast<const uint32_t*>(p)[i];
    case xcclUint64:
      return static_cast<double>(reinterpret_cast<const uint64_t*>(p)[i]);
    default:
      return NAN;
  }
}

}  // namespace xccl_test
