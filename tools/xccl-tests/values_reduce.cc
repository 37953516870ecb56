// The checker's references for reductions (values.h): Reducer folds every rank's input at
// one index, within a rounding bound where the library may combine ranks in any order, or
// bit for bit as the rank-order fold (--reproducible); matches() compares one element.
#include <cmath>
#include <cstring>

#include "values.h"

namespace xt {

Value premulScalar(xcclDataType_t t) {
  Value v;
  if (typeInfo(t).kind == Kind::kFloat)
    v.f = 0.5;
  else
    v.i = 3;
  return v;
}

Reducer::Reducer(const Generator& gen, xcclRedOp_t op, int nranks)
    : gen_(gen), op_(op), nranks_(nranks), scalar_(premulScalar(gen.type())) {}

Expected Reducer::at(uint64_t idx) const {
  xcclDataType_t t = gen_.type();
  const TypeInfo& ti = typeInfo(t);
  Expected e;
  if (ti.kind == Kind::kBool) {
    bool isAnd = op_ == xcclProd || op_ == xcclMin || op_ == xcclBand;
    int64_t acc = isAnd ? 1 : 0;
    for (int r = 0; r < nranks_; ++r) {
      int64_t x = gen_.at(r, idx).i;
      if (op_ == xcclBxor)
        acc ^= x;
      else if (isAnd)
        acc &= x;
      else
        acc |= x;
    }
    e.v.i = acc;
    return e;
  }
  if (ti.kind != Kind::kFloat) {
    // Modular arithmetic in 64 bits, truncated to the type's width at the end: the same
    // result whatever order the library combines ranks in.
    uint64_t acc = op_ == xcclProd || op_ == xcclBand ? (op_ == xcclBand ? ~0ULL : 1ULL) : 0ULL;
    int64_t mm = gen_.at(0, idx).i;
    for (int r = 0; r < nranks_; ++r) {
      Value x = gen_.at(r, idx);
      auto u = static_cast<uint64_t>(x.i);
      switch (op_) {
        case xcclSum:
        case xcclAvg:
          acc += u;
          break;
        case xcclPremulSum:
          acc += static_cast<uint64_t>(
              roundTo(t, Value{static_cast<int64_t>(u * static_cast<uint64_t>(scalar_.i)), 0}).i);
          break;
        case xcclProd:
          acc *= u;
          break;
        case xcclMax:  // unsigned types compare as unsigned (uint64 lives in i's bits)
          mm = (ti.kind == Kind::kUnsigned ? u > static_cast<uint64_t>(mm) : x.i > mm) ? x.i : mm;
          break;
        case xcclMin:
          mm = (ti.kind == Kind::kUnsigned ? u < static_cast<uint64_t>(mm) : x.i < mm) ? x.i : mm;
          break;
        case xcclBand:
          acc &= u;
          break;
        case xcclBor:
          acc |= u;
          break;
        case xcclBxor:
          acc ^= u;
          break;
        default:
          break;
      }
    }
    Value res;
    res.i = (op_ == xcclMax || op_ == xcclMin) ? mm : static_cast<int64_t>(acc);
    res = roundTo(t, res);
    if (op_ == xcclAvg) {
      res.i =
          ti.kind == Kind::kUnsigned
              ? static_cast<int64_t>(static_cast<uint64_t>(res.i) / static_cast<uint64_t>(nranks_))
              : res.i / nranks_;
    }
    e.v = res;
    return e;
  }
  if (reproducible() && op_ != xcclMax && op_ != xcclMin) {
    // The left fold in rank order, each step computed in double and rounded to t: what the
    // library's kernels give (half types compute in float; double then rounding to t gives
    // the same bits for + and * and /, as 53 >= 2p + 2 for every p here).
    auto input = [&](int r) {
      double x = gen_.at(r, idx).f;
      if (op_ == xcclPremulSum) x = roundTo(t, Value{0, x * scalar_.f}).f;
      return x;
    };
    double acc = input(0);
    for (int r = 1; r < nranks_; ++r) {
      const double x = input(r);
      acc = roundTo(t, Value{0, op_ == xcclProd ? acc * x : acc + x}).f;
    }
    if (op_ == xcclAvg) acc = roundTo(t, Value{0, acc / nranks_}).f;
    e.v.f = acc;
    e.exactBits = true;
    return e;
  }
  double u = ti.unitRoundoff;
  double acc = op_ == xcclProd ? 1.0 : 0.0, absSum = 0;
  double mm = gen_.at(0, idx).f;
  for (int r = 0; r < nranks_; ++r) {
    double x = gen_.at(r, idx).f;
    if (op_ == xcclPremulSum) x = roundTo(t, Value{0, x * scalar_.f}).f;
    switch (op_) {
      case xcclProd:
        acc *= x;
        break;
      case xcclMax:
        mm = x > mm ? x : mm;
        break;
      case xcclMin:
        mm = x < mm ? x : mm;
        break;
      default:
        acc += x;
        absSum += std::fabs(x);
        break;
    }
  }
  int n = nranks_;
  switch (op_) {
    case xcclMax:
    case xcclMin:
      e.v.f = mm;
      e.tol = 0;
      break;
    case xcclProd:
      e.v.f = acc;
      e.tol = n * u * std::fabs(acc);
      break;
    case xcclAvg:
      e.v.f = acc / n;
      e.tol = 2 * u * (absSum + std::fabs(acc / n));
      break;
    default:
      e.v.f = acc;
      e.tol = (n - 1) * u * absSum;
      break;  // sum, premulsum
  }
  return e;
}

bool matches(const void* buf, xcclDataType_t t, size_t idx, const Expected& e) {
  Value got = load(buf, t, idx);
  if (typeInfo(t).kind != Kind::kFloat) return got.i == e.v.i;
  if (e.exactBits) {
    char want[8] = {0};
    store(want, t, 0, e.v);
    return std::memcmp(static_cast<const char*>(buf) + idx * typeInfo(t).size, want,
                       typeInfo(t).size) == 0;
  }
  if (std::isnan(got.f)) return false;
  if (got.f == e.v.f) return true;  // includes infinities
  return std::fabs(got.f - e.v.f) <= e.tol;
}

}  // namespace xt
