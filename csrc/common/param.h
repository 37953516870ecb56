// Environment knobs. Each knob is declared once, next to its use:
//
//   XCCL_PARAM(ShmDisable, "SHM_DISABLE", 0)   // reads XCCL_SHM_DISABLE once
//   if (xcclParamShmDisable()) ...
//
//   XCCL_PARAM_STR(Algo, "ALGO", "")           // string knob
//
// Every knob is listed in docs/ENV.md. The accessor reads the environment on each call, so
// tests can change a knob between communicators: read knobs at setup, not in hot loops.
#pragma once

#include <cstdint>
#include <string>

namespace xccl {
// Reads XCCL_<name>; returns deflt when unset or empty. Throws InvalidUsage when the
// value is not an integer, so a typo never silently becomes the default.
int64_t readIntParam(const char* name, int64_t deflt);
std::string readStrParam(const char* name, const char* deflt);
}  // namespace xccl

#define XCCL_PARAM(fn, name, deflt) \
  static inline int64_t xcclParam##fn() { return ::xccl::readIntParam(name, (deflt)); }

#define XCCL_PARAM_STR(fn, name, deflt) \
  static inline std::string xcclParam##fn() { return ::xccl::readStrParam(name, (deflt)); }
