// Rendezvous.cpp — the per-initialisation store scope (Rendezvous.hpp says why).
#include "Rendezvous.hpp"

#include <cstdlib>
#include <memory>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "Utils.hpp"

namespace torch_xccl {

std::string attemptId() {
  const char* run = std::getenv("TORCHELASTIC_RUN_ID");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  bool hasRun = run != nullptr && *run != '\0';
  bool hasRestart = restart != nullptr && *restart != '\0';
  if (!hasRun && !hasRestart) return "local";
  return std::string(hasRun ? run : "-") + ".r" + (hasRestart ? restart : "0");
}

c10::intrusive_ptr<c10d::Store> scopeToInitialisation(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int size, int64_t callTimeoutMs,
                                                      std::string* scope) {
  const std::string attempt = attemptId();
  const std::string counter = "xccl.inits/" + attempt + "/n" + std::to_string(size);
  auto value = std::make_shared<int64_t>(0);
  auto s = store;
  if (!callBounded([s, counter, value] { *value = s->add(counter, 1); }, callTimeoutMs)) {
    throwDist("xccl init: the store did not answer add(" + counter + ") within " +
              std::to_string(callTimeoutMs) +
              " ms (TORCH_XCCL_STORE_CALL_TIMEOUT_MS): its host (MASTER_ADDR, rank 0's) is "
              "unreachable or stopped");
  }
  if (*value < 1) {
    throwDist("xccl init: the store's counter " + counter + " answered " + std::to_string(*value) +
              " to add(1): not a store this backend can scope");
  }
  const int64_t generation = (*value - 1) / size;
  *scope = "xccl." + attempt + ".g" + std::to_string(generation);
  return c10::make_intrusive<c10d::PrefixStore>(*scope, store);
}

}  // namespace torch_xccl
