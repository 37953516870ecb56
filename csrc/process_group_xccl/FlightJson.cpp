// FlightJson.cpp — the flight recorder's dump as JSON (FlightJson.hpp): the process, its
// groups, then one object per recorded operation.
#include "FlightJson.hpp"

#include <unistd.h>

#include <cstdlib>
#include <iomanip>
#include <sstream>

#include <torch/version.h>

#include "FlightDump.hpp"
#include "xccl.h"

namespace torch_xccl {
namespace flight {

namespace {

constexpr const char* kFormatVersion = "1.0";

long long envNumber(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' ? n : -1;
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

void str(std::ostream& os, const std::string& s) {
  os << '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        os << "\\\"";
        break;
      case '\\':
        os << "\\\\";
        break;
      case '\n':
        os << "\\n";
        break;
      case '\r':
        os << "\\r";
        break;
      case '\t':
        os << "\\t";
        break;
      default:
        if (c < 0x20) {
          os << "\\u" << std::hex << std::setw(4) << std::setfill('0') << static_cast<int>(c)
             << std::dec << std::setfill(' ');
        } else {
          os << c;
        }
    }
  }
  os << '"';
}

void nsOrNull(std::ostream& os, int64_t ns) {
  if (ns == 0) {
    os << "null";
  } else {
    os << ns;
  }
}

void msOrNull(std::ostream& os, int64_t from, int64_t to) {
  if (from == 0 || to == 0) {
    os << "null";
  } else {
    os << std::fixed << std::setprecision(3) << static_cast<double>(to - from) / 1e6;
    os.unsetf(std::ios::floatfield);
  }
}

// "input_sizes": [[8, 2]], "input_dtypes": ["float32"], then the same for the outputs.
void tensors(std::ostream& os, const FlightEntry& e) {
  size_t dim = 0;
  const size_t n = e.ndims.size();
  std::ostringstream dtypes;
  for (int side = 0; side < 2; ++side) {
    const size_t from = side == 0 ? 0 : e.nInputs;
    const size_t to = side == 0 ? e.nInputs : n;
    os << (side == 0 ? "\"input_sizes\": [" : ", \"output_sizes\": [");
    dtypes.str("");
    for (size_t i = from; i < to; ++i) {
      os << (i > from ? ", [" : "[");
      for (size_t d = 0; d < e.ndims[i]; ++d) os << (d > 0 ? ", " : "") << e.dims[dim++];
      os << "]";
      dtypes << (i > from ? ", \"" : "\"") << flightDtypeName(e.dtypes[i]) << "\"";
    }
    os << "], " << (side == 0 ? "\"input_dtypes\": [" : "\"output_dtypes\": [") << dtypes.str()
       << "]";
  }
}

void entry(std::ostream& os, const FlightEntry& e, const std::vector<FlightGroup>& groups) {
  const FlightGroup* g = e.group < groups.size() ? &groups[e.group] : nullptr;
  os << "{\"id\": " << e.id << ", \"group\": ";
  str(os, g != nullptr ? g->name : std::string("?"));
  os << ", \"group_rank\": " << (g != nullptr ? g->rank : -1) << ", \"op\": ";
  str(os, e.op);
  os << ", \"is_p2p\": " << (e.p2p ? "true" : "false")
     << ", \"collective_seq\": " << (e.p2p ? 0 : e.seq) << ", \"p2p_seq\": " << (e.p2p ? e.seq : 0)
     << ", \"op_seq\": " << e.opSeq << ", \"device\": ";
  str(os, e.device.str());
  os << ", \"state\": \"" << flightStateName(e.state) << "\", ";
  tensors(os, e);
  os << ", \"time_enqueued_ns\": ";
  nsOrNull(os, e.tEnqueued);
  os << ", \"time_started_ns\": ";
  nsOrNull(os, e.tStarted);
  os << ", \"time_ended_ns\": ";
  nsOrNull(os, e.tEnded);
  os << ", \"queued_ms\": ";
  msOrNull(os, e.tEnqueued, e.tStarted);
  os << ", \"duration_ms\": ";
  msOrNull(os, e.tStarted, e.tEnded);
  os << ", \"timeout_ms\": " << e.timeoutMs << ", \"error\": ";
  if (e.error.empty()) {
    os << "null";
  } else {
    str(os, e.error);
  }
  os << "}";
}

std::string versionString(int code) {
  return std::to_string(code / 10000) + "." + std::to_string((code / 100) % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace

Identity identity(const std::vector<FlightGroup>& groups) {
  Identity id;
  for (const auto& g : groups) {
    if (g.ranks.empty()) return Identity{g.rank, g.size};
  }
  id.rank = envNumber("RANK");
  id.worldSize = envNumber("WORLD_SIZE");
  if (id.rank < 0) {
    for (const auto& g : groups) {
      if (g.rank >= 0 && static_cast<size_t>(g.rank) < g.ranks.size()) {
        id.rank = static_cast<long long>(g.ranks[g.rank]);
        break;
      }
    }
  }
  return id;
}

std::string json(const std::string& reason) {
  FlightSnapshot s = FlightRecorder::get().snapshot();
  Identity id = identity(s.groups);
  int xv = 0;
  std::string xcclVersion = xcclGetVersion(&xv) == xcclSuccess ? versionString(xv) : "unknown";
  std::ostringstream os;
  os << "{\"version\": \"" << kFormatVersion << "\", \"xccl_version\": \"" << xcclVersion
     << "\", \"torch_version\": \"" << TORCH_VERSION_MAJOR << "." << TORCH_VERSION_MINOR << "."
     << TORCH_VERSION_PATCH << "\", \"rank\": " << id.rank << ", \"world_size\": " << id.worldSize
     << ", \"pid\": " << static_cast<long long>(getpid()) << ", \"hostname\": ";
  str(os, hostName());
  os << ", \"reason\": ";
  str(os, reason);
  os << ", \"time_ns\": " << s.tNow << ", \"buffer_size\": " << s.capacity
     << ", \"recorded\": " << s.recorded << ",\n \"groups\": [";
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const FlightGroup& g = s.groups[i];
    os << (i > 0 ? ",\n  " : "\n  ") << "{\"name\": ";
    str(os, g.name);
    os << ", \"rank\": " << g.rank << ", \"size\": " << g.size << ", \"ranks\": [";
    for (int r = 0; r < g.size; ++r) {
      os << (r > 0 ? ", " : "") << (g.ranks.empty() ? static_cast<uint64_t>(r) : g.ranks[r]);
    }
    os << "]}";
  }
  os << "],\n \"entries\": [";
  for (size_t i = 0; i < s.entries.size(); ++i) {
    os << (i > 0 ? ",\n  " : "\n  ");
    entry(os, s.entries[i], s.groups);
  }
  os << "]}\n";
  return os.str();
}

}  // namespace flight
}  // namespace torch_xccl
