// Environment knobs. Each knob is one row, declared once next to its use: its accessor, the
// variable it reads, its default and its range (inclusive):
//
//   XCCL_PARAM(ShmDisable, "SHM_DISABLE", 0, 0, 1)   // reads XCCL_SHM_DISABLE
//   if (xcclParamShmDisable()) ...
//
//   XCCL_PARAM_STR(Algo, "ALGO", "")                 // string knob
//
// A value that is not an integer, or lies outside the range, is an error naming the knob
// (InvalidUsage), never a silent default. A value other than the default is reported once
// per knob and process (libxccl: an INFO line of its log; libxdev: its own report). Every
// knob is listed in docs/ENV.md with the same default (tests/python/test_env_docs.py reads
// these rows and the doc and fails when they disagree). The accessor reads the environment
// on each call, so tests can change a knob between communicators: read knobs at setup (a
// communicator's creation), not in hot loops.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace xccl {

constexpr int64_t kKnobMin = std::numeric_limits<int64_t>::min();  // no lower bound
constexpr int64_t kKnobMax = std::numeric_limits<int64_t>::max();  // no upper bound

// Reads XCCL_<name>; returns deflt when unset or empty. Throws InvalidUsage when the value
// is not an integer or lies outside [lo, hi].
int64_t readIntParam(const char* name, int64_t deflt, int64_t lo, int64_t hi);
std::string readStrParam(const char* name, const char* deflt);

// Where a knob set to other than its default is reported, once per knob and process (each
// library that links common/ sets its own; unset: not reported). `line` reads
// "XCCL_NAME=value (default D)".
void setKnobReporter(void (*report)(const std::string& line));

}  // namespace xccl

#define XCCL_PARAM(fn, name, deflt, lo, hi)                                                \
  static inline int64_t xcclParam##fn() {                                                  \
    static_assert((lo) <= (deflt) && (deflt) <= (hi), "a knob's default is in its range"); \
    return ::xccl::readIntParam(name, (deflt), (lo), (hi));                                \
  }

#define XCCL_PARAM_STR(fn, name, deflt) \
  static inline std::string xcclParam##fn() { return ::xccl::readStrParam(name, (deflt)); }
