// C entry points: the reduction kernels, queued on a stream or run on the calling thread.
#include <cstring>

#include "kernels.h"
#include "runtime.h"
#include "status.h"

using xdev::api;
using xdev::Runtime;

namespace {

void checkOperands(size_t count, std::initializer_list<const void*> ptrs) {
  if (count == 0) return;
  for (const void* p : ptrs) {
    XDEV_REQUIRE(p != nullptr, xdevErrorInvalidValue, "NULL operand for ", count, " elements");
  }
}

// One scalar of dtype, copied out of the caller's memory at the call.
uint64_t loadScalar(const void* hostScalar, xdevDataType_t dtype) {
  XDEV_REQUIRE(hostScalar != nullptr, xdevErrorInvalidValue, "hostScalar is NULL");
  uint64_t bits = 0;
  std::memcpy(&bits, hostScalar, xdev::typeSize(dtype));
  return bits;
}

}  // namespace

extern "C" {

xdevError_t xdevReduceAsync(void* dst, const void* a, const void* b, size_t count,
                            xdevDataType_t dtype, xdevRedOp_t op, xdevStream_t stream) {
  return api("xdevReduceAsync", [&] {
    auto s = Runtime::get().stream(stream);
    xdev::checkReduce(dtype, op);
    checkOperands(count, {dst, a, b});
    if (count > 0) {
      s->enqueue([=] { xdev::reduceKernel(dst, a, b, count, dtype, op); }, true,
                 {"reduce", xdevActivityKernel, 0, 0});
    }
    return xdevSuccess;
  });
}

xdevError_t xdevScaleAsync(void* dst, const void* src, size_t count, xdevDataType_t dtype,
                           const void* hostScalar, xdevStream_t stream) {
  return api("xdevScaleAsync", [&] {
    auto s = Runtime::get().stream(stream);
    xdev::checkScale(dtype);
    checkOperands(count, {dst, src});
    uint64_t scalar = loadScalar(hostScalar, dtype);
    if (count > 0) {
      s->enqueue([=] { xdev::scaleKernel(dst, src, count, dtype, &scalar); }, true,
                 {"scale", xdevActivityKernel, 0, 0});
    }
    return xdevSuccess;
  });
}

xdevError_t xdevDivideAsync(void* dst, size_t count, xdevDataType_t dtype, int64_t divisor,
                            xdevStream_t stream) {
  return api("xdevDivideAsync", [&] {
    auto s = Runtime::get().stream(stream);
    xdev::checkDivide(dtype, divisor);
    checkOperands(count, {dst});
    if (count > 0) {
      s->enqueue([=] { xdev::divideKernel(dst, count, dtype, divisor); }, true,
                 {"divide", xdevActivityKernel, 0, 0});
    }
    return xdevSuccess;
  });
}

xdevError_t xdevReduce(void* dst, const void* a, const void* b, size_t count, xdevDataType_t dtype,
                       xdevRedOp_t op) {
  return api("xdevReduce", [&] {
    xdev::checkReduce(dtype, op);
    checkOperands(count, {dst, a, b});
    xdev::reduceKernel(dst, a, b, count, dtype, op);
    return xdevSuccess;
  });
}

xdevError_t xdevReduceCopy(void* const* dsts, int ndst, const void* const* srcs, int nsrc,
                           size_t count, xdevDataType_t dtype, xdevRedOp_t op) {
  return api("xdevReduceCopy", [&] {
    xdev::checkReduce(dtype, op);
    XDEV_REQUIRE(ndst >= 1 && nsrc >= 1, xdevErrorInvalidValue, "reduce-copy of ", nsrc,
                 " sources into ", ndst, " destinations (at least one each)");
    XDEV_REQUIRE(count == 0 || (dsts != nullptr && srcs != nullptr), xdevErrorInvalidValue,
                 "NULL operand list");
    for (int k = 0; k < ndst && count > 0; ++k) checkOperands(count, {dsts[k]});
    for (int k = 0; k < nsrc && count > 0; ++k) checkOperands(count, {srcs[k]});
    xdev::reduceCopyKernel(dsts, ndst, srcs, nsrc, count, dtype, op);
    return xdevSuccess;
  });
}

xdevError_t xdevScale(void* dst, const void* src, size_t count, xdevDataType_t dtype,
                      const void* hostScalar) {
  return api("xdevScale", [&] {
    xdev::checkScale(dtype);
    checkOperands(count, {dst, src});
    uint64_t scalar = loadScalar(hostScalar, dtype);
    xdev::scaleKernel(dst, src, count, dtype, &scalar);
    return xdevSuccess;
  });
}

xdevError_t xdevDivide(void* dst, size_t count, xdevDataType_t dtype, int64_t divisor) {
  return api("xdevDivide", [&] {
    xdev::checkDivide(dtype, divisor);
    checkOperands(count, {dst});
    xdev::divideKernel(dst, count, dtype, divisor);
    return xdevSuccess;
  });
}

}  // extern "C"
