// Element types, deterministic inputs and host references (see values.h for the scheme).
#include "values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace xt {
namespace {

const TypeInfo kTypes[] = {
    {xcclInt8, "int8", 1, Kind::kSigned, 0},
    {xcclUint8, "uint8", 1, Kind::kUnsigned, 0},
    {xcclInt32, "int32", 4, Kind::kSigned, 0},
    {xcclInt64, "int64", 8, Kind::kSigned, 0},
    {xcclFloat16, "half", 2, Kind::kFloat, 0x1p-11},
    {xcclFloat32, "float", 4, Kind::kFloat, 0x1p-24},
    {xcclFloat64, "double", 8, Kind::kFloat, 0x1p-53},
    {xcclBfloat16, "bfloat16", 2, Kind::kFloat, 0x1p-8},
    {xcclBool, "bool", 1, Kind::kBool, 0},
    {xcclFloat8e4m3, "float8e4m3", 1, Kind::kFloat, 0x1p-4},
    {xcclFloat8e5m2, "float8e5m2", 1, Kind::kFloat, 0x1p-3},
    {xcclUint16, "uint16", 2, Kind::kUnsigned, 0},
    {xcclUint32, "uint32", 4, Kind::kUnsigned, 0},
    {xcclUint64, "uint64", 8, Kind::kUnsigned, 0},
};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == xcclNumTypes, "one row per xccl type");

const char* const kOpNames[] = {"sum",       "prod", "max", "min", "avg",
                                "premulsum", "band", "bor", "bxor"};

uint64_t splitmix(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

const TypeInfo& typeInfo(xcclDataType_t t) { return kTypes[static_cast<int>(t)]; }

const char* opName(xcclRedOp_t op) { return (op >= 0 && op < xcclNumOps) ? kOpNames[op] : "?"; }

bool parseType(const std::string& s, xcclDataType_t* t) {
  static const struct {
    const char* name;
    xcclDataType_t t;
  } kAliases[] = {{"float", xcclFloat32},
                  {"float32", xcclFloat32},
                  {"fp32", xcclFloat32},
                  {"double", xcclFloat64},
                  {"float64", xcclFloat64},
                  {"fp64", xcclFloat64},
                  {"half", xcclFloat16},
                  {"float16", xcclFloat16},
                  {"fp16", xcclFloat16},
                  {"bfloat16", xcclBfloat16},
                  {"bf16", xcclBfloat16},
                  {"int8", xcclInt8},
                  {"char", xcclInt8},
                  {"uint8", xcclUint8},
                  {"int32", xcclInt32},
                  {"int", xcclInt32},
                  {"int64", xcclInt64},
                  {"bool", xcclBool},
                  {"float8e4m3", xcclFloat8e4m3},
                  {"fp8e4m3", xcclFloat8e4m3},
                  {"float8e5m2", xcclFloat8e5m2},
                  {"fp8e5m2", xcclFloat8e5m2},
                  {"uint16", xcclUint16},
                  {"uint32", xcclUint32},
                  {"uint64", xcclUint64}};
  for (const auto& a : kAliases) {
    if (s == a.name) {
      *t = a.t;
      return true;
    }
  }
  return false;
}

bool parseOp(const std::string& s, xcclRedOp_t* op) {
  for (int i = 0; i < xcclNumOps; ++i) {
    if (s == kOpNames[i]) {
      *op = static_cast<xcclRedOp_t>(i);
      return true;
    }
  }
  return false;
}

std::string opUnsupportedReason(xcclDataType_t t, xcclRedOp_t op) {
  Kind k = typeInfo(t).kind;
  bool bitwise = op == xcclBand || op == xcclBor || op == xcclBxor;
  if (bitwise && k == Kind::kFloat) {
    return std::string("op ") + opName(op) + " is not defined for " + typeInfo(t).name +
           " (bitwise ops need an integer or bool type)";
  }
  if ((op == xcclAvg || op == xcclPremulSum) && k == Kind::kBool) {
    return std::string("op ") + opName(op) + " is not defined for bool";
  }
  return "";
}

Value load(const void* buf, xcclDataType_t t, size_t idx) {
  const char* p = static_cast<const char*>(buf) + idx * typeInfo(t).size;
  Value v;
  switch (t) {
    case xcclInt8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      v.i = x;
      break;
    }
    case xcclUint8:
    case xcclBool: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      v.i = x;
      break;
    }
    case xcclInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      v.i = x;
      break;
    }
    case xcclInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      v.i = x;
      break;
    }
    case xcclFloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.f = halfToFloat(x);
      break;
    }
    case xcclBfloat16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.f = bf16ToFloat(x);
      break;
    }
    case xcclFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      v.f = x;
      break;
    }
    case xcclFloat64: {
      std::memcpy(&v.f, p, 8);
      break;
    }
    case xcclFloat8e4m3:
    case xcclFloat8e5m2: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      v.f = fp8ToFloat(x, t == xcclFloat8e4m3);
      break;
    }
    case xcclUint16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.i = x;
      break;
    }
    case xcclUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      v.i = x;
      break;
    }
    case xcclUint64: {
      std::memcpy(&v.i, p, 8);
      break;
    }
    default:
      break;
  }
  return v;
}

void store(void* buf, xcclDataType_t t, size_t idx, Value v) {
  char* p = static_cast<char*>(buf) + idx * typeInfo(t).size;
  auto u = static_cast<uint64_t>(v.i);
  switch (t) {
    case xcclInt8:
    case xcclUint8: {
      auto x = static_cast<uint8_t>(u);
      std::memcpy(p, &x, 1);
      break;
    }
    case xcclBool: {
      uint8_t x = v.i != 0;
      std::memcpy(p, &x, 1);
      break;
    }
    case xcclInt32: {
      auto x = static_cast<uint32_t>(u);
      std::memcpy(p, &x, 4);
      break;
    }
    case xcclInt64: {
      std::memcpy(p, &u, 8);
      break;
    }
    case xcclFloat16: {
      uint16_t x = floatToHalf(static_cast<float>(v.f));
      std::memcpy(p, &x, 2);
      break;
    }
    case xcclBfloat16: {
      uint16_t x = floatToBf16(static_cast<float>(v.f));
      std::memcpy(p, &x, 2);
      break;
    }
    case xcclFloat32: {
      auto x = static_cast<float>(v.f);
      std::memcpy(p, &x, 4);
      break;
    }
    case xcclFloat64: {
      std::memcpy(p, &v.f, 8);
      break;
    }
    case xcclFloat8e4m3:
    case xcclFloat8e5m2: {
      uint8_t x = floatToFp8(v.f, t == xcclFloat8e4m3);
      std::memcpy(p, &x, 1);
      break;
    }
    case xcclUint16: {
      auto x = static_cast<uint16_t>(u);
      std::memcpy(p, &x, 2);
      break;
    }
    case xcclUint32: {
      auto x = static_cast<uint32_t>(u);
      std::memcpy(p, &x, 4);
      break;
    }
    case xcclUint64: {
      std::memcpy(p, &u, 8);
      break;
    }
    default:
      break;
  }
}

Value roundTo(xcclDataType_t t, Value v) {
  char tmp[8] = {0};
  store(tmp, t, 0, v);
  return load(tmp, t, 0);
}

bool sameBits(const void* a, const void* b, xcclDataType_t t, size_t idx) {
  size_t es = typeInfo(t).size;
  return std::memcmp(static_cast<const char*>(a) + idx * es, static_cast<const char*>(b) + idx * es,
                     es) == 0;
}

namespace {
bool gReproducible = false;
}  // namespace

void setReproducible(bool on) { gReproducible = on; }
bool reproducible() { return gReproducible; }

Domain domainFor(bool hasOp, xcclRedOp_t op) {
  if (!hasOp) return Domain::kMinMax;
  if (gReproducible && (op == xcclSum || op == xcclAvg || op == xcclPremulSum || op == xcclProd)) {
    return Domain::kWide;
  }
  switch (op) {
    case xcclSum:
    case xcclAvg:
    case xcclPremulSum:
      return Domain::kSum;
    case xcclProd:
      return Domain::kProd;
    case xcclBand:
    case xcclBor:
    case xcclBxor:
      return Domain::kBits;
    default:
      return Domain::kMinMax;
  }
}

Value Generator::at(int rank, uint64_t idx) const {
  uint64_t h = splitmix(splitmix(seed_ * 0x100000001b3ULL + static_cast<uint64_t>(rank)) ^ idx);
  const TypeInfo& ti = typeInfo(t_);
  Value v;
  if (ti.kind == Kind::kBool) {
    v.i = static_cast<int64_t>(h & 1);
    return v;
  }
  if (ti.kind != Kind::kFloat) {
    bool sgn = ti.kind == Kind::kSigned;
    static const int64_t kSignedProd[] = {1, -1, 2, -2, 3};
    switch (d_) {
      case Domain::kSum:
        v.i = sgn ? static_cast<int64_t>(h % 17) - 8 : static_cast<int64_t>(h % 16);
        break;
      case Domain::kProd:
        v.i = sgn ? kSignedProd[h % 5] : static_cast<int64_t>(1 + h % 3);
        break;
      default:
        v.i = static_cast<int64_t>(h);
        break;
    }
    return roundTo(t_, v);  // truncates to the type's width (and sign-extends)
  }
  static const double kProd[] = {1, -1, 2, -2, 0.5, -0.5};
  if (d_ == Domain::kWide) {
    // A 12-bit mantissa times 2^e: e in [-8, 8] (the 8-bit floats: [-3, 3]), rounded to the
    // type below; sums of a few of them round differently in different orders.
    const bool fp8 = t_ == xcclFloat8e4m3 || t_ == xcclFloat8e5m2;
    const int spread = fp8 ? 3 : 8;
    const double m = 1.0 + static_cast<double>((h >> 20) & 0xfff) / 4096.0;
    const int e = static_cast<int>((h >> 8) % static_cast<uint64_t>(2 * spread + 1)) - spread;
    v.f = ((h & 1) != 0 ? -m : m) * std::ldexp(1.0, e);
    return roundTo(t_, v);
  }
  auto centered = [&](uint64_t range) {  // uniform integer in [-(range/2), range/2]
    return static_cast<double>(static_cast<int64_t>(h % range) - static_cast<int64_t>(range / 2));
  };
  switch (d_) {
    case Domain::kSum:
      if (t_ == xcclFloat8e4m3)
        v.f = centered(5);  // |sum| <= 2n: exact to n = 8
      else if (t_ == xcclFloat8e5m2)
        v.f = centered(3);  // |sum| <= n: exact to n = 8
      else if (t_ == xcclFloat16)
        v.f = centered(33);  // |sum| <= 16n: exact to n = 128
      else if (t_ == xcclBfloat16)
        v.f = centered(17);  // |sum| <= 8n: exact to n = 32
      else
        v.f = centered(4001) / 8.0;  // eighths up to 250
      break;
    case Domain::kProd:
      v.f = kProd[h % 6];
      break;
    default:
      if (t_ == xcclFloat64)
        v.f = centered(1ULL << 40) / 256.0;
      else if (t_ == xcclFloat32)
        v.f = centered(2000001) / 4.0;
      else if (t_ == xcclFloat8e4m3 || t_ == xcclFloat8e5m2)
        v.f = centered(801) / 4.0;  // within both ranges, rounded below
      else
        v.f = centered(4001);  // half: exact; bfloat16: rounded below
      break;
  }
  return roundTo(t_, v);
}

void Generator::fill(void* buf, int rank, uint64_t first, size_t count) const {
  for (size_t j = 0; j < count; ++j) store(buf, t_, j, at(rank, first + j));
}

int64_t Generator::countDiffs(const void* buf, int rank, uint64_t first, size_t count) const {
  int64_t diffs = 0;
  char tmp[8] = {0};
  for (size_t j = 0; j < count; ++j) {
    store(tmp, t_, 0, at(rank, first + j));
    if (!sameBits(static_cast<const char*>(buf) + j * typeInfo(t_).size, tmp, t_, 0)) ++diffs;
  }
  return diffs;
}

}  // namespace xt
