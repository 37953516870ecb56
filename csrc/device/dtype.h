// Element types shared by the device implementations: the 16-bit floating types (defined by
// the xdev runtime, whose kernels use them) and which xccl types are floating point.
#pragma once

#include "xccl.h"
#include "xdev/half.h"

namespace xccl {

using xdev::BFloat16;
using xdev::fromFloat;
using xdev::Half;
using xdev::toFloat;

inline bool isFloatType(xcclDataType_t t) {
  return t == xcclFloat16 || t == xcclFloat32 || t == xcclFloat64 || t == xcclBfloat16;
}

}  // namespace xccl
