// The cost model: see cost.h. Each formula follows the schedule its algorithm's file
// describes (allreduce.cc, broadcast.cc); n ranks, H hosts of L ranks (the largest host when
// they differ), S bytes, p the largest power of two <= n.
#include "cost.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.h"

namespace xccl {

namespace {

constexpr double kRingSlice = 512 << 10;   // XCCL_RING_SLICE's default
constexpr double kChainChunk = 256 << 10;  // XCCL_CHAIN_CHUNK's default

int log2Floor(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

}  // namespace

CostParams CostParams::parse(const std::string& text) {
  CostParams p;
  std::istringstream in(text);
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string key, extra;
    double value = 0;
    if (!(words >> key)) continue;
    if (!(words >> value) || (words >> extra) || !(value >= 0)) {
      throw InvalidArgument(strCat("cost parameters, line ", lineNo, ": '", line,
                                   "' is not 'key non-negative-number'"));
    }
    if (key == "shm_alpha_us") {
      p.shmAlphaUs = value;
    } else if (key == "shm_gbs") {
      p.shmGBs = value;
    } else if (key == "net_alpha_us") {
      p.netAlphaUs = value;
    } else if (key == "net_gbs") {
      p.netGBs = value;
    } else if (key == "reduce_gbs") {
      p.reduceGBs = value;
    } else if (key == "device_reduce_gbs") {
      p.deviceReduceGBs = value;
    } else if (key == "msg_us") {
      p.msgUs = value;
    } else if (key == "cores") {
      p.cores = value;
    } else {
      throw InvalidArgument(strCat("cost parameters, line ", lineNo, ": unknown key '", key,
                                   "' (shm_alpha_us, shm_gbs, net_alpha_us, net_gbs, "
                                   "reduce_gbs, device_reduce_gbs, msg_us, cores)"));
    }
  }
  XCCL_CHECK_ARG(p.shmGBs > 0 && p.reduceGBs > 0 && p.deviceReduceGBs > 0,
                 "cost parameters: shm_gbs, reduce_gbs and device_reduce_gbs must be positive");
  return p;
}

std::string CostParams::format() const {
  return strCat("shm_alpha_us ", shmAlphaUs, "\nshm_gbs ", shmGBs, "\nnet_alpha_us ", netAlphaUs,
                "\nnet_gbs ", netGBs, "\nreduce_gbs ", reduceGBs, "\ndevice_reduce_gbs ",
                deviceReduceGBs, "\nmsg_us ", msgUs, "\ncores ", cores, "\n");
}

std::vector<std::string> modelledAlgorithms(CollType type) {
  switch (type) {
    case CollType::kAllReduce:
      return {"ring", "direct", "recdoubling", "rabenseifner", "hierarchical", "twolevel"};
    case CollType::kBroadcast:
    case CollType::kReduce:
      return {"chain", "direct", "tree"};
    case CollType::kAllGather:
    case CollType::kReduceScatter:
      return {"ring", "direct"};
    default:
      return {};
  }
}

CostFeatures costFeatures(const std::string& algorithm, CollType type, size_t bytes,
                          const topo::Plan& plan, double cores) {
  const int n = plan.nranks();
  const int H = static_cast<int>(plan.hosts.size());
  int L = 1;
  for (const auto& h : plan.hosts) L = std::max(L, static_cast<int>(h.size()));
  const double S = static_cast<double>(bytes);
  const bool multi = H > 1;
  CostFeatures f;
  if (n <= 1 || bytes == 0) return f;
  // A hop's latency on the critical path: across hosts when the step crosses one.
  auto hops = [&](double count, bool crosses) { (crosses ? f.netHops : f.shmHops) += count; };

  if (type == CollType::kAllReduce) {
    const int p = 1 << log2Floor(n);
    const int lg = log2Floor(n);
    const bool extra = p != n;
    if (algorithm == "ring") {
      const double steps = 2.0 * (n - 1);
      hops(steps, multi);  // the ring advances at its slowest edge
      // Sends 2(n-1)/n S, receives half of it reduced on arrival and half copied.
      if (multi) {
        f.netBytes = 2.0 * (n - 1) / n * S;  // one ring edge leaves each host
      } else {
        f.shmBytes = 3.0 * (n - 1) / n * S;
      }
      f.reduceBytes = (n - 1.0) / n * S;
      f.messages = steps * std::max(1.0, std::ceil(S / n / kRingSlice));
    } else if (algorithm == "direct") {
      hops(1, multi);
      f.shmBytes = 2.0 * (n - 1) * S;  // its input to n-1 peers, n-1 inputs into temporaries
      if (multi) f.netBytes = static_cast<double>(L) * (n - L) * S;
      f.reduceBytes = (n - 1.0) * S;  // the fold
      f.messages = 2.0 * (n - 1);
    } else if (algorithm == "recdoubling") {
      // Rounds whose partner distance is at least L leave the host (ranks host-contiguous);
      // then all L ranks of a host push S through its NIC at once.
      int cross = 0;
      for (int mask = 1; mask < p; mask <<= 1) cross += multi && mask >= L ? 1 : 0;
      const int rounds = lg + (extra ? 2 : 0);
      hops(rounds - cross, false);
      hops(cross, true);
      // Each round sends the partial and reduces the partner's on arrival; the unfold copies.
      f.shmBytes = (rounds - cross) * S + (extra ? S : 0);
      f.netBytes = static_cast<double>(cross) * L * S;
      f.reduceBytes = (lg + (extra ? 1 : 0)) * S;
      f.messages = 2.0 * rounds;
    } else if (algorithm == "rabenseifner") {
      // Halving then doubling: round `mask` moves S * mask / p each way (2 of them).
      double shm = 0, net = 0;
      int cross = 0;
      for (int mask = 1; mask < p; mask <<= 1) {
        const double moved = 2.0 * S * mask / p;  // sent in the halving and the doubling
        if (multi && mask >= L) {
          net += moved * L;
          ++cross;
        } else {
          shm += moved;
        }
      }
      const int rounds = 2 * lg + (extra ? 2 : 0);
      hops(rounds - 2 * cross, false);
      hops(2 * cross, true);
      // Sends (above), the doubling's receipts copied, and the fold's send, the unfold's copy.
      f.shmBytes = shm + (p - 1.0) / p * S + (extra ? 2 * S : 0);
      f.netBytes = net;
      f.reduceBytes = (p - 1.0) / p * S + (extra ? S : 0);
      f.messages = 2.0 * rounds;
    } else if (algorithm == "hierarchical") {
      XCCL_CHECK_ARG(multi && L >= 2, "hierarchical needs 2+ hosts of 2+ ranks each");
      f.shmHops = 2.0 * (L - 1);
      // Its step 2 as the library runs it: a ring, or from XCCL_HIERARCHICAL_LOG_MIN_HOSTS
      // hosts Rabenseifner over the column (2 log2 of the power of two below H rounds, two
      // more with a fold; the fold's pairs move the column's block twice more).
      const int ph = 1 << log2Floor(H);
      const bool logColumn = H >= readTuning().hierarchicalLogMinHosts;
      f.netHops = logColumn ? 2.0 * log2Floor(H) + (ph != H ? 2 : 0) : 2.0 * (H - 1);
      // The fold and unfold: each of the host's L columns moves its S/L block twice more.
      if (logColumn && ph != H) f.netBytes += 2.0 * S;
      // Along the host: the reduce-scatter sends, the allgather sends and copies.
      f.shmBytes = 3.0 * (L - 1) / L * S;
      f.netBytes += 2.0 * (H - 1) / H * S;  // L columns of S/L each share the NIC
      f.reduceBytes = (L - 1.0) / L * S + (H - 1.0) / H * S / L;
      f.messages = 2.0 * (L - 1) + 2.0 * f.netHops;
    } else if (algorithm == "twolevel") {
      XCCL_CHECK_ARG(multi, "twolevel needs 2+ hosts");
      f.shmHops = 2;
      f.netHops = 1;
      f.shmBytes = 2.0 * (L - 1) * S;  // gather to the leader, then its broadcast
      f.netBytes = (H - 1.0) * S;
      f.reduceBytes = (L - 1.0 + H - 1.0) * S;
      f.messages = 2.0 * (L - 1) + 2.0 * (H - 1);
    } else {
      throw InvalidArgument(strCat("the cost model has no allreduce '", algorithm, "'"));
    }
  } else if (type == CollType::kBroadcast) {
    if (algorithm == "chain") {
      const double chunks = std::max(1.0, std::ceil(S / kChainChunk));
      const double stages = (n - 1) + chunks - 1;  // the pipeline's fill, then one per chunk
      hops(stages, multi);
      // Each stage: a chunk received (copied) and forwarded (copied again).
      (multi ? f.netBytes : f.shmBytes) += (multi ? 1 : 2) * stages * std::min(S, kChainChunk);
      f.messages = 2.0 * chunks;
    } else if (algorithm == "direct") {
      hops(1, multi);
      f.shmBytes = static_cast<double>(n) * S;  // the root writes every copy, one is read
      if (multi) f.netBytes = (n - L) * S;
      f.messages = n - 1.0;
    } else if (algorithm == "tree") {
      const int depth = log2Floor(n) + ((n & (n - 1)) != 0 ? 1 : 0);
      hops(depth, multi);
      (multi ? f.netBytes : f.shmBytes) += (multi ? 1 : 2) * depth * S;  // sent, received
      f.messages = 2.0 * depth;
    } else {
      throw InvalidArgument(strCat("the cost model has no broadcast '", algorithm, "'"));
    }
  } else if (type == CollType::kReduce) {
    // broadcast's schedules run backwards, each stage reducing what it passes on
    if (algorithm == "chain") {
      const double chunks = std::max(1.0, std::ceil(S / kChainChunk));
      const double stages = (n - 1) + chunks - 1;
      hops(stages, multi);
      // Each stage: a chunk reduced on arrival, then sent on.
      (multi ? f.netBytes : f.shmBytes) += stages * std::min(S, kChainChunk);
      f.reduceBytes = stages * std::min(S, kChainChunk);
      f.messages = 2.0 * chunks;
    } else if (algorithm == "direct") {
      hops(1, multi);
      f.shmBytes = (n - 1.0) * S;  // the root copies every input into a temporary
      if (multi) f.netBytes = (n - L) * S;
      f.reduceBytes = (n - 1.0) * S;  // and folds them
      f.messages = n - 1.0;
    } else if (algorithm == "tree") {
      const int depth = log2Floor(n) + ((n & (n - 1)) != 0 ? 1 : 0);
      hops(depth, multi);
      (multi ? f.netBytes : f.shmBytes) += depth * S;  // each level: sent, reduced on arrival
      f.reduceBytes = depth * S;
      f.messages = 2.0 * depth;
    } else {
      throw InvalidArgument(strCat("the cost model has no reduce '", algorithm, "'"));
    }
  } else if (type == CollType::kAllGather || type == CollType::kReduceScatter) {
    // S is the whole buffer (allgather's output, reducescatter's input), S/n per rank.
    const bool reduces = type == CollType::kReduceScatter;
    const double block = S / n;
    if (algorithm == "ring") {
      hops(n - 1.0, multi);
      // n-1 shares sent; received copied (allgather) or reduced on arrival (reducescatter).
      (multi ? f.netBytes : f.shmBytes) += (multi || reduces ? 1 : 2) * (n - 1.0) * block;
      if (reduces) f.reduceBytes = (n - 1.0) * block;
      f.messages = (n - 1.0) * std::max(1.0, std::ceil(block / kRingSlice));
    } else if (algorithm == "direct") {
      hops(1, multi);
      f.shmBytes = 2.0 * (n - 1) * block;  // shares sent, and received into place or temporaries
      if (multi) f.netBytes = static_cast<double>(L) * (n - L) * block;
      if (reduces) f.reduceBytes = (n - 1.0) * block;  // the fold
      f.messages = 2.0 * (n - 1);
    } else {
      throw InvalidArgument(strCat("the cost model has no ", collName(type), " '", algorithm, "'"));
    }
  } else {
    throw InvalidArgument(
        strCat("the cost model covers allreduce, broadcast, reduce, "
               "allgather and reducescatter, not ",
               collName(type)));
  }
  // More ranks than cores: each rank runs 1/over of the time, and every CPU-side unit
  // stretches by that much (the NIC does not).
  const double over = cores > 0 ? std::max(1.0, L / cores) : 1.0;
  f.shmHops *= over;
  f.netHops *= over;
  f.shmBytes *= over;
  f.reduceBytes *= over;
  f.messages *= over;
  return f;
}

double predictUs(const CostFeatures& f, const CostParams& p, const SystemRates& rates) {
  const double netGBs = p.netGBs > 0 ? p.netGBs : rates.netGBs;
  const bool onDevices = rates.intraGBs > 0;
  const double intraGBs = onDevices ? rates.intraGBs : p.shmGBs;
  const double reduceGBs = onDevices ? p.deviceReduceGBs : p.reduceGBs;
  double us = f.shmHops * p.shmAlphaUs + f.netHops * p.netAlphaUs + f.messages * p.msgUs +
              f.shmBytes / (intraGBs * 1e3) + f.reduceBytes / (reduceGBs * 1e3);
  if (f.netBytes > 0) {
    XCCL_CHECK_ARG(netGBs > 0, "the system describes no NIC rate: give net_gbs");
    us += f.netBytes / (netGBs * 1e3);
  }
  return us;
}

}  // namespace xccl
