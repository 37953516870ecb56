#include "DesyncDebug.hpp"

#include "Utils.hpp"

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

namespace torch_xccl {
namespace {

std::string key(int rank) { return "xccl_desync/" + std::to_string(rank); }

struct Record {
  bool present = false;
  uint64_t seq = 0;
  std::string call;
};

Record parse(const std::vector<uint8_t>& v) {
  Record r;
  std::string s(v.begin(), v.end());
  size_t bar = s.find('|');
  if (bar == std::string::npos) return r;
  r.present = true;
  r.seq = std::strtoull(s.substr(0, bar).c_str(), nullptr, 10);
  r.call = s.substr(bar + 1);
  return r;
}

}  // namespace

std::shared_ptr<DesyncDebugger> DesyncDebugger::fromEnv(c10::intrusive_ptr<c10d::Store> store,
                                                        int rank, int size) {
  if (envKnob("TORCH_XCCL_DESYNC_DEBUG", 0, 0, 1) == 0) return nullptr;
  return std::make_shared<DesyncDebugger>(std::move(store), rank, size);
}

DesyncDebugger::DesyncDebugger(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

void DesyncDebugger::recordIssued(uint64_t seq, const std::string& call) noexcept {
  try {
    std::string v = std::to_string(seq) + "|" + call;
    store_->set(key(rank_), std::vector<uint8_t>(v.begin(), v.end()));
    lastCall_ = call;
  } catch (const std::exception& e) {
    storeError_ = e.what();
  }
}

std::string DesyncDebugger::report(uint64_t seq) noexcept {
  std::ostringstream os;
  os << "\n[TORCH_XCCL_DESYNC_DEBUG] collective #" << seq << " failed on rank " << rank_ << " ("
     << lastCall_ << "). What each rank issued last:";
  std::vector<int> behind, other, silent, ahead;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int r = 0; r < size_; ++r) {
    Record rec;
    try {
      // A rank's record appears with its first collective; give slow ranks a moment.
      while (!store_->check({key(r)}) && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (store_->check({key(r)})) rec = parse(store_->get(key(r)));
    } catch (const std::exception& e) {
      os << "\n  rank " << r << ": store error: " << e.what();
      continue;
    }
    if (!rec.present) {
      silent.push_back(r);
      os << "\n  rank " << r << ": no record (it has issued no collective on this group)";
      continue;
    }
    os << "\n  rank " << r << ": #" << rec.seq << " " << rec.call;
    if (rec.seq < seq) {
      behind.push_back(r);
      os << "  <- behind: it has not issued #" << seq;
    } else if (rec.seq > seq) {
      ahead.push_back(r);
    } else if (r != rank_ && rec.call != lastCall_) {
      other.push_back(r);
      os << "  <- a different call at #" << seq;
    }
  }
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
  };
  if (!behind.empty()) os << "\n  => rank(s) " << list(behind) << " are behind";
  if (!other.empty()) os << "\n  => rank(s) " << list(other) << " issued a different collective";
  if (!silent.empty()) os << "\n  => rank(s) " << list(silent) << " never issued a collective";
  if (behind.empty() && other.empty() && silent.empty()) {
    os << "\n  => every rank issued #" << seq << " as the same call: not a desync (see the error)";
  }
  if (!storeError_.empty()) os << "\n  (recording failed earlier: " << storeError_ << ")";
  return os.str();
}

}  // namespace torch_xccl
