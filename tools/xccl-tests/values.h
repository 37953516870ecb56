// Element types, deterministic inputs and host-side reference results for xccl-tests.
//
// Inputs are a pure function of (seed, dtype, value domain, rank, index), so every rank
// can recompute every other rank's contribution and check a result element by element
// without any extra communication. The value domain depends on the operation so that
// references stay exact where possible:
//   kSum    (sum, avg, premulsum) small integers (and eighths for float/double), so that
//           sums over dozens of ranks are exact even in half and bfloat16;
//   kProd   (prod) +-1, +-2, +-0.5 (floats) or small integers: products are exact powers of
//           two for floats and wrap modulo 2^bits for integers, as the library's do;
//   kMinMax (min, max, and collectives that only move data) spread-out values;
//   kBits   (band, bor, bxor) raw random bits.
// Floating-point results are compared with a tolerance bounded by the number of rounding
// steps (n-1 additions, each rounded to the element type: half/bfloat16 accumulate in
// float32 per step and round back), which is zero for the exact cases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "xccl.h"

namespace xt {

enum class Kind { kSigned, kUnsigned, kFloat, kBool };

struct TypeInfo {
  xcclDataType_t type;
  const char* name;  // nccl-tests spelling: float, half, bfloat16, int32, ...
  size_t size;
  Kind kind;
  double unitRoundoff;  // 2^-p for floating types (p = significand bits), 0 otherwise
};

const TypeInfo& typeInfo(xcclDataType_t t);
const char* opName(xcclRedOp_t op);  // sum, prod, min, max, avg, premulsum, band, bor, bxor
bool parseType(const std::string& s, xcclDataType_t* t);
bool parseOp(const std::string& s, xcclRedOp_t* op);
// "" when op is defined on t (mirrors the library's support matrix), else the reason.
std::string opUnsupportedReason(xcclDataType_t t, xcclRedOp_t op);

uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);
// FP8 (values_convert.cc): e4m3fn saturating at +-448, e5m2 infinite from 61440, nearest even.
uint8_t floatToFp8(double x, bool e4m3);
double fp8ToFloat(uint8_t c, bool e4m3);

// One element: integers and bool in i (sign- or zero-extended), floating types in f.
struct Value {
  int64_t i = 0;
  double f = 0;
};

Value load(const void* buf, xcclDataType_t t, size_t idx);
// Rounds floating values to t (nearest even), truncates integers modulo 2^bits.
void store(void* buf, xcclDataType_t t, size_t idx, Value v);
// The value after a round trip through t.
Value roundTo(xcclDataType_t t, Value v);
bool sameBits(const void* a, const void* b, xcclDataType_t t, size_t idx);

// kWide (--reproducible, floating sums and products): values of many magnitudes, so that the
// order of a fold changes its bits.
enum class Domain { kSum, kProd, kMinMax, kBits, kWide };
Domain domainFor(bool hasOp, xcclRedOp_t op);
// --reproducible: floating sums and products draw kWide inputs, and Reducer gives the left
// fold in rank order, each step rounded to the type, to be matched bit for bit.
void setReproducible(bool on);
bool reproducible();

class Generator {
 public:
  Generator(xcclDataType_t t, Domain d, uint64_t seed) : t_(t), d_(d), seed_(seed) {}
  // Element idx of rank's input; always exactly representable in t.
  Value at(int rank, uint64_t idx) const;
  // buf[j] = at(rank, first + j) for j < count.
  void fill(void* buf, int rank, uint64_t first, size_t count) const;
  // Number of elements of buf[j] != at(rank, first + j).
  int64_t countDiffs(const void* buf, int rank, uint64_t first, size_t count) const;
  xcclDataType_t type() const { return t_; }

 private:
  xcclDataType_t t_;
  Domain d_;
  uint64_t seed_;
};

// The exact premulsum scalar used by the tool (0.5 for floating types, 3 for integers).
Value premulScalar(xcclDataType_t t);

// Host reference of a reduction over ranks 0..nranks-1 of the inputs at one index.
struct Expected {
  Value v;
  double tol = 0;          // floating types: allowed |got - v.f|
  bool exactBits = false;  // floating types: the stored bits of v must match (--reproducible)
};

class Reducer {
 public:
  Reducer(const Generator& gen, xcclRedOp_t op, int nranks);
  Expected at(uint64_t idx) const;

 private:
  const Generator& gen_;
  xcclRedOp_t op_;
  int nranks_;
  Value scalar_;
};

// True when element idx of buf equals e (within tolerance for floating types).
bool matches(const void* buf, xcclDataType_t t, size_t idx, const Expected& e);

}  // namespace xt
