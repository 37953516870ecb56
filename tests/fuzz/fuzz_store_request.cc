// Requests to the unique-id store server (bootstrap/unique_id.cc parseStoreRequest), from
// any bytes: need-more, bad with a reason, or a request whose fields lie inside the input.
#include "collectives/bootstrap/bootstrap_internal.h"
#include "collectives/transport/tcp/socket.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in(reinterpret_cast<const char*>(data), size);
  // Several requests back to back, as a client pipelines them.
  for (int i = 0; i < 16 && !in.empty(); ++i) {
    xccl::StoreRequest req;
    size_t used = 0;
    std::string why;
    xccl::StoreParse r = xccl::parseStoreRequest(in, &req, &used, &why);
    if (r == xccl::StoreParse::kBad && why.empty()) __builtin_trap();
    if (r != xccl::StoreParse::kDone) break;
    if (used == 0 || used > in.size() || req.key.empty() ||
        req.key.size() + req.value.size() > used) {
      __builtin_trap();
    }
    in.erase(0, used);
  }
  return 0;
}

std::vector<std::string> xcclFuzzSeeds() {
  std::string set = "S";
  xccl::net::putU32(set, 6);
  set += "peer/0";
  xccl::net::putU32(set, 5);
  set += "hello";
  std::string get = "G";
  xccl::net::putU32(get, 6);
  get += "peer/0";
  xccl::net::putU32(get, 250);
  std::string take = "T";
  xccl::net::putU32(take, 11);
  take += "tree/down/3";
  xccl::net::putU32(take, 0);
  return {set, get, set + get, set + take};
}
