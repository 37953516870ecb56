// Fuzz targets for every parser of bytes from outside the process (docs/RELIABILITY.md):
// each file defines LLVMFuzzerTestOneInput (libFuzzer's entry point) and xcclFuzzSeeds()
// (valid inputs to start from). Built two ways:
//   fuzz_<name>            with standalone_driver.cc: runs the seeds, then N inputs mutated
//                          from them (deterministic); what CTest runs (a short sample);
//   fuzz_<name>_libfuzzer  with clang's -fsanitize=fuzzer,address,undefined when the
//                          compiler is clang (scripts/fuzz.sh: the long runs).
// A target must never crash, hang or leak on any input: parse errors are exceptions it
// catches; anything else (a signal, a sanitizer report, an uncaught exception) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::vector<std::string> xcclFuzzSeeds();
