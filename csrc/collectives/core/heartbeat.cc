#include "heartbeat.h"

#include <chrono>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"

namespace xccl {

// How often each rank shows its peers that it is alive (ms); 0 turns heartbeats off.
XCCL_PARAM(HeartbeatMs, "HEARTBEAT_MS", 1000, 0, kKnobMax)
// How long a peer may show no life (no beat, no byte moved) before the operations waiting
// on it fail (ms).
XCCL_PARAM(HeartbeatTimeoutMs, "HEARTBEAT_TIMEOUT_MS", 5000, 1, kKnobMax)

int64_t heartbeatIntervalMs() { return xcclParamHeartbeatMs(); }

int64_t silenceLimitMs() { return xcclParamHeartbeatMs() == 0 ? 0 : xcclParamHeartbeatTimeoutMs(); }

Heartbeat::Heartbeat(int rank, const std::vector<Connection*>& conns, std::function<void()> beatAll,
                     bool laterPeers)
    : rank_(rank),
      n_(conns.size()),
      conns_(new std::atomic<Connection*>[conns.size()]),
      beatAll_(std::move(beatAll)),
      lastHeard_(conns.size(), Clock::now()),
      silent_(conns.size(), false),
      seen_(conns.size(), false),
      intervalMs_(xcclParamHeartbeatMs()),
      timeoutMs_(xcclParamHeartbeatTimeoutMs()) {
  XCCL_CHECK(intervalMs_ >= 0, "XCCL_HEARTBEAT_MS=", intervalMs_, " must be >= 0 (0: off)");
  XCCL_CHECK(timeoutMs_ > 0, "XCCL_HEARTBEAT_TIMEOUT_MS=", timeoutMs_, " must be positive");
  bool anyPeer = beatAll_ != nullptr || laterPeers;
  for (size_t p = 0; p < n_; ++p) {
    conns_[p].store(conns[p], std::memory_order_relaxed);
    anyPeer |= conns[p] != nullptr;
  }
  if (intervalMs_ == 0 || !anyPeer) return;
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::loop() {
  setLogRank(rank_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    visit(Clock::now());
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(intervalMs_), [&] { return stop_; });
  }
}

void Heartbeat::visit(Clock::time_point now) {
  if (beatAll_) beatAll_();
  for (size_t p = 0; p < n_; ++p) {
    Connection* c = conns_[p].load(std::memory_order_acquire);
    if (c == nullptr) continue;
    if (!seen_[p]) {  // connected since the last visit: its silence counts from now
      seen_[p] = true;
      lastHeard_[p] = now;
    }
    try {
      c->sendBeat();
      std::string note;
      if (c->heardFromPeer(&note)) {
        lastHeard_[p] = now;
        if (silent_[p]) {
          silent_[p] = false;
          c->setSilence("");
          XCCL_WARN(NET, "rank ", rank_, ": rank ", p, " (", c->kind(), ") is heard from again");
        }
        continue;
      }
      const auto quiet =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - lastHeard_[p]).count();
      if (quiet < timeoutMs_ || silent_[p]) continue;
      silent_[p] = true;
      const std::string why =
          strCat("sent no heartbeat and moved no data for ", quiet,
                 " ms (XCCL_HEARTBEAT_TIMEOUT_MS=", timeoutMs_, ")",
                 note.empty() ? std::string() : strCat(": ", note),
                 note.empty() ? "; stopped, hung, or the link to it is cut" : "");
      XCCL_WARN(NET, "rank ", rank_, ": rank ", p, " (", c->kind(), ") ", why);
      c->setSilence(why);
    } catch (const std::exception& e) {
      XCCL_WARN(NET, "rank ", rank_, ": heartbeat with rank ", p, " failed: ", e.what());
    }
  }
}

}  // namespace xccl
