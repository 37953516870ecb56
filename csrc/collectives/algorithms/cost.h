// The cost model of the algorithms (xccl-topo simulate; docs/SIMULATOR.md): how long a
// collective takes, per algorithm, on a planned system, from a handful of calibrated
// constants. NCCL's tuning model is the anchor: a latency per step and a bandwidth per link
// class, here with a reduction rate and a CPU cost per message, and the time-slicing of ranks
// that outnumber their host's cores.
//
// The model is linear in its constants: costFeatures() says how many of each unit an
// algorithm spends (hops on the critical path, bytes through the busiest link, bytes reduced,
// messages posted), and predictUs() weighs them. bench/bench_simulate.py fits the constants
// to measured runs by least squares on exactly these features, so the simulator and its
// calibration cannot drift apart.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/topology/plan.h"
#include "exchange.h"

namespace xccl {

struct CostFeatures {
  double shmHops = 0;      // message latencies between ranks of a host, on the critical path
  double netHops = 0;      // message latencies across hosts
  double shmBytes = 0;     // bytes one rank copies (sends, and receipts not reduced on arrival)
  double netBytes = 0;     // bytes through the busiest NIC direction of a host
  double reduceBytes = 0;  // bytes one rank reduces (on arrival, or folding temporaries)
  double messages = 0;     // messages one rank posts (CPU cost each)
};

struct CostParams {
  double shmAlphaUs = 2.0;  // per intra-host hop
  double shmGBs = 4.0;      // one rank's copy rate through host memory
  double netAlphaUs = 30.0;
  double netGBs = 0;              // 0: the system's NIC speed (topo file), per direction
  double reduceGBs = 4.0;         // one rank's reduction rate (host memory)
  double deviceReduceGBs = 1000;  // the same for ranks placed on devices (topo files)
  double msgUs = 1.0;             // CPU per posted message
  // Usable cores per host; 0: ranks never outnumber cores. Fractional for "hosts" that share
  // a machine (network namespaces: 2 cores under 4 hosts are 0.5 per host).
  double cores = 0;
  // "key value" lines ('#' comments): shm_alpha_us, shm_gbs, net_alpha_us, net_gbs,
  // reduce_gbs, device_reduce_gbs, msg_us, cores. Unknown keys and bad numbers are InvalidArgument.
  static CostParams parse(const std::string& text);
  std::string format() const;
};

// The algorithms the model covers for `type` (allreduce, broadcast, reduce, allgather,
// reducescatter); empty otherwise.
std::vector<std::string> modelledAlgorithms(CollType type);

// Units `algorithm` spends for one call of `bytes` bytes (the whole buffer) on `plan`, with
// `cores` usable cores per host (0: unlimited). netGBs: the system's NIC rate per direction,
// used to express network bytes. Throws InvalidArgument for an algorithm it does not model.
CostFeatures costFeatures(const std::string& algorithm, CollType type, size_t bytes,
                          const topo::Plan& plan, double cores);

// What the planned system itself says about its links: the NIC rate per direction between
// hosts (0: not described), and, for ranks placed on devices, the slowest intra-host edge
// of the ring (0: ranks share host memory, so params.shmGBs applies).
struct SystemRates {
  double netGBs = 0;
  double intraGBs = 0;
};

// Time in microseconds: the system's rates where it describes them (a topo file's NICs and
// device links), the parameters' otherwise (params.netGBs, when set, wins over the NICs).
double predictUs(const CostFeatures& f, const CostParams& params, const SystemRates& rates);

}  // namespace xccl
