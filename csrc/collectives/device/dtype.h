// Element types shared by the device implementations: the 16-bit floating types
// (common/half.h, which the xdev runtime's kernels use too) and which xccl types are floating
// point.
#pragma once

#include "common/half.h"
#include "xccl.h"

namespace xccl {

inline bool isFloatType(xcclDataType_t t) {
  return t == xcclFloat16 || t == xcclFloat32 || t == xcclFloat64 || t == xcclBfloat16 ||
         t == xcclFloat8e4m3 || t == xcclFloat8e5m2;
}

}  // namespace xccl
