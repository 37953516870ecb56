#include "render.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "common/error.h"

namespace xccl {
namespace topo {

namespace {

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

std::string gbsText(double gbs) {
  if (std::isinf(gbs)) return "-";
  std::ostringstream os;
  os << std::setprecision(gbs < 10 ? 2 : 3) << gbs << " GB/s";
  return os.str();
}

std::string ringText(const std::vector<int>& ring, const Plan& plan) {
  std::string s;
  for (size_t i = 0; i < ring.size(); ++i) {
    if (i > 0) s += plan.hostOf[ring[i]] != plan.hostOf[ring[i - 1]] ? " | " : " ";
    s += std::to_string(ring[i]);
  }
  return s;
}

std::string deviceName(const System& sys, const Place& p) {
  return p.device < 0 ? std::string("-") : strCat(sys.deviceType, ":", sys.devices[p.device].local);
}

}  // namespace

std::string legend() {
  return "Legend:\n"
         "  X    = self\n"
         "  XL   = direct device link(s) (NVLink / MLU-Link class)\n"
         "  PIX  = at most one PCIe switch between the two\n"
         "  PXB  = several PCIe switches, no host bridge\n"
         "  PHB  = through a PCIe host bridge (the same CPU)\n"
         "  NODE = between host bridges of one NUMA node\n"
         "  SYS  = across NUMA nodes (the CPU interconnect)\n"
         "  NET  = another host, through the NICs\n";
}

std::string hostMatrix(const System& sys, int host) {
  const Host& h = sys.hosts[host];
  std::ostringstream os;
  const size_t w = 6;
  std::vector<std::string> names;
  for (int d : h.devices) names.push_back("D" + std::to_string(sys.devices[d].local));
  for (size_t i = 0; i < h.nics.size(); ++i) names.push_back("NIC" + std::to_string(i));
  os << "host " << h.name << " (" << sys.deviceType << ", " << h.devices.size() << " device(s), "
     << h.numaNodes << " NUMA node(s))\n";
  os << pad("", w);
  for (const std::string& n : names) os << pad(n, w);
  os << "NUMA\n";
  auto kindOf = [&](int i, int j) -> std::string {
    const int nd = static_cast<int>(h.devices.size());
    if (i == j) return "X";
    if (i < nd && j < nd) return linkKindName(sys.path(h.devices[i], h.devices[j]).kind);
    int numaI = i < nd ? sys.devices[h.devices[i]].numa : sys.nics[h.nics[i - nd]].numa;
    int numaJ = j < nd ? sys.devices[h.devices[j]].numa : sys.nics[h.nics[j - nd]].numa;
    return numaI == numaJ ? "PHB" : "SYS";
  };
  for (size_t i = 0; i < names.size(); ++i) {
    os << pad(names[i], w);
    for (size_t j = 0; j < names.size(); ++j)
      os << pad(kindOf(static_cast<int>(i), static_cast<int>(j)), w);
    const int nd = static_cast<int>(h.devices.size());
    os << (static_cast<int>(i) < nd ? sys.devices[h.devices[i]].numa
                                    : sys.nics[h.nics[i - nd]].numa)
       << "\n";
  }
  std::map<std::string, double> speeds;
  for (const Link& l : sys.links) {
    if (sys.devices[l.a].host != host) continue;
    std::string k = linkKindName(l.kind);
    speeds[k] = speeds.count(k) ? std::min(speeds[k], l.gbs) : l.gbs;
  }
  if (!speeds.empty()) {
    os << "Links (slowest of each kind):";
    for (const auto& [k, v] : speeds) os << " " << k << " " << gbsText(v);
    os << "\n";
  }
  for (size_t i = 0; i < h.nics.size(); ++i) {
    const Nic& n = sys.nics[h.nics[i]];
    os << "NIC" << i << ": " << n.name << " " << n.gbps << " Gbit/s, NUMA " << n.numa << "\n";
  }
  os << legend();
  return os.str();
}

std::string rankMatrix(const System& sys, const std::vector<Place>& places, const Plan& plan) {
  std::ostringstream os;
  const int n = plan.nranks();
  const size_t w = 6;
  os << pad("", w);
  for (int p = 0; p < n; ++p) os << pad("r" + std::to_string(p), w);
  os << "host / device\n";
  for (int r = 0; r < n; ++r) {
    os << pad("r" + std::to_string(r), w);
    for (int p = 0; p < n; ++p) {
      os << pad(r == p ? "X" : linkKindName(rankPath(sys, places, r, p).kind), w);
    }
    os << sys.hosts[places[r].host].name << " (host " << plan.hostOf[r] << ") / "
       << deviceName(sys, places[r]) << "\n";
  }
  os << "ring: " << ringText(plan.ring(), plan) << "  (" << plan.hosts.size() << " host(s), "
     << plan.networkHops << " network hop(s), slowest link " << linkKindName(plan.bottleneckKind)
     << " " << gbsText(plan.bottleneckGBs) << ")\n";
  return os.str();
}

std::string planText(const System& sys, const std::vector<Place>& places, const Plan& plan) {
  std::ostringstream os;
  os << plan.nranks() << " rank(s) on " << plan.hosts.size() << " host(s)\n";
  os << "rank  host            device    local\n";
  for (int r = 0; r < plan.nranks(); ++r) {
    os << pad(std::to_string(r), 6) << pad(sys.hosts[places[r].host].name, 16)
       << pad(deviceName(sys, places[r]), 10) << plan.localIndex(r) << "\n";
  }
  for (size_t c = 0; c < plan.rings.size(); ++c) {
    os << "ring " << c << ": " << ringText(plan.rings[c], plan) << "\n";
  }
  os << "network hops per ring: " << plan.networkHops << " (minimum "
     << (plan.hosts.size() > 1 ? plan.hosts.size() : 0)
     << "); slowest link on the ring: " << linkKindName(plan.bottleneckKind) << " "
     << gbsText(plan.bottleneckGBs) << "\n";
  if (plan.hosts.size() > 1) {
    os << "hierarchy: " << plan.hosts.size() << " host(s) of";
    for (const auto& h : plan.hosts) os << " " << h.size();
    os << " rank(s)" << (plan.uniformHosts ? "" : " (uneven: hierarchical allreduce declines)")
       << "\n  intra-host runs:";
    for (const auto& h : plan.hosts) {
      os << " [";
      for (size_t i = 0; i < h.size(); ++i) os << (i ? " " : "") << h[i];
      os << "]";
    }
    if (plan.uniformHosts) {
      os << "\n  columns (inter-host rings):";
      for (size_t i = 0; i < plan.hosts[0].size(); ++i) {
        os << " [";
        for (size_t h = 0; h < plan.hosts.size(); ++h) os << (h ? " " : "") << plan.hosts[h][i];
        os << "]";
      }
    }
    os << "\n  leaders (twolevel):";
    for (const auto& h : plan.hosts) os << " " << h[0];
    os << "\n";
  }
  return os.str();
}

namespace {

const char* kindColor(LinkKind k) {
  switch (k) {
    case LinkKind::kXl:
      return "#1a9850";
    case LinkKind::kPix:
      return "#4575b4";
    case LinkKind::kPxb:
      return "#74add1";
    case LinkKind::kPhb:
      return "#fdae61";
    case LinkKind::kNode:
      return "#f46d43";
    case LinkKind::kSys:
      return "#d73027";
    default:
      return "#888888";
  }
}

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string htmlPage(const System& sys, const std::vector<Place>* places, const Plan* plan) {
  // Layout: hosts side by side; a host's devices on a circle (links are chords), its NICs
  // below, and one network bar under all hosts.
  const double hostW = 340, hostH = 380, gap = 40, margin = 20;
  const double width = margin * 2 + sys.hosts.size() * (hostW + gap);
  const double netY = margin + hostH + 50, height = netY + 60;
  std::map<int, std::pair<double, double>> pos;  // device -> centre
  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  for (size_t h = 0; h < sys.hosts.size(); ++h) {
    const Host& host = sys.hosts[h];
    const double x0 = margin + h * (hostW + gap), y0 = margin;
    svg << "<rect x='" << x0 << "' y='" << y0 << "' width='" << hostW << "' height='" << hostH
        << "' rx='14' fill='#f7f7f7' stroke='#444'/>\n<text x='" << x0 + 12 << "' y='" << y0 + 22
        << "' font-weight='bold'>" << esc(host.name) << "</text>\n<text x='" << x0 + 12 << "' y='"
        << y0 + 40 << "' font-size='12'>" << host.devices.size() << " " << esc(sys.deviceType)
        << " device(s), " << host.numaNodes << " NUMA node(s)</text>\n";
    const double cx = x0 + hostW / 2, cy = y0 + 190, rad = 110;
    const size_t nd = host.devices.size();
    for (size_t i = 0; i < nd; ++i) {
      const double a = 2 * M_PI * i / std::max<size_t>(nd, 1) - M_PI / 2;
      pos[host.devices[i]] = {cx + rad * std::cos(a), cy + rad * std::sin(a)};
    }
    for (size_t i = 0; i < nd; ++i) {
      for (size_t j = i + 1; j < nd; ++j) {
        Path p = sys.path(host.devices[i], host.devices[j]);
        if (p.kind == LinkKind::kPhb || p.kind == LinkKind::kSys)
          continue;  // the fabric, not drawn
        auto [xa, ya] = pos[host.devices[i]];
        auto [xb, yb] = pos[host.devices[j]];
        svg << "<line x1='" << xa << "' y1='" << ya << "' x2='" << xb << "' y2='" << yb
            << "' stroke='" << kindColor(p.kind) << "' stroke-width='"
            << std::max(1.0, std::min(8.0, p.gbs / 25)) << "'><title>" << linkKindName(p.kind)
            << " " << gbsText(p.gbs) << "</title></line>\n";
      }
    }
    for (size_t i = 0; i < nd; ++i) {
      auto [x, y] = pos[host.devices[i]];
      const Device& d = sys.devices[host.devices[i]];
      svg << "<circle cx='" << x << "' cy='" << y << "' r='18' fill='white' stroke='#222'><title>"
          << esc(sys.deviceType) << ":" << d.local << " NUMA " << d.numa
          << "</title></circle>\n<text x='" << x << "' y='" << y + 4
          << "' text-anchor='middle' font-size='12'>D" << d.local << "</text>\n";
    }
    for (size_t i = 0; i < host.nics.size(); ++i) {
      const Nic& n = sys.nics[host.nics[i]];
      const double nx = x0 + 20 + i * 110, ny = y0 + hostH - 40;
      svg << "<rect x='" << nx << "' y='" << ny << "' width='100' height='26' fill='#e0ecf4' "
          << "stroke='#225'/><text x='" << nx + 50 << "' y='" << ny + 17
          << "' text-anchor='middle' font-size='11'>" << esc(n.name) << " " << n.gbps
          << "G</text>\n<line x1='" << nx + 50 << "' y1='" << ny + 26 << "' x2='" << nx + 50
          << "' y2='" << netY << "' stroke='#888' stroke-width='2'/>\n";
    }
  }
  svg << "<rect x='" << margin << "' y='" << netY << "' width='" << width - 2 * margin
      << "' height='10' fill='#888'/><text x='" << margin << "' y='" << netY + 28
      << "' font-size='12'>network</text>\n";
  if (plan != nullptr && places != nullptr && plan->nranks() > 1) {
    // Ring 0 as arrows between the ranks' devices (ranks without a device: the host's centre).
    auto where = [&](int r) {
      const Place& p = (*places)[r];
      if (p.device >= 0 && pos.count(p.device)) return pos[p.device];
      const double x0 = margin + p.host * (hostW + gap);
      return std::pair<double, double>{x0 + hostW / 2, margin + 190.0};
    };
    const auto& ring = plan->ring();
    for (size_t i = 0; i < ring.size(); ++i) {
      auto [xa, ya] = where(ring[i]);
      auto [xb, yb] = where(ring[(i + 1) % ring.size()]);
      // Beside the link it follows, not on it (8 px to the left of the step's direction):
      // the pointer reaches both, each with its own title; a 2-rank ring's two steps part.
      const double len = std::hypot(xb - xa, yb - ya);
      if (len > 0) {
        const double ox = -(yb - ya) / len * 8, oy = (xb - xa) / len * 8;
        xa += ox, xb += ox, ya += oy, yb += oy;
      }
      svg << "<line x1='" << xa << "' y1='" << ya << "' x2='" << xb << "' y2='" << yb
          << "' stroke='#6a3d9a' stroke-dasharray='6 4' stroke-width='2' marker-end='url(#arrow)'>"
          << "<title>ring step " << i << ": rank " << ring[i] << " to "
          << ring[(i + 1) % ring.size()] << "</title></line>\n";
    }
  }
  std::ostringstream page;
  page << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>xccl-topo</title>\n"
       << "<style>body{font-family:sans-serif;margin:16px} pre{background:#f4f4f4;padding:8px}"
       << " .k{display:inline-block;width:18px;height:6px;margin:0 4px 2px 12px}</style>"
       << "</head><body>\n<h2>xccl topology: " << sys.hosts.size() << " host(s), "
       << sys.devices.size() << " " << esc(sys.deviceType) << " device(s)</h2>\n<p>";
  for (LinkKind k : {LinkKind::kXl, LinkKind::kPix, LinkKind::kPxb, LinkKind::kNode}) {
    page << "<span class='k' style='background:" << kindColor(k) << "'></span>" << linkKindName(k);
  }
  page << " (PHB and SYS pairs are the host fabric, not drawn; hover a line for its speed)";
  if (plan != nullptr) page << "; dashed arrows: ring 0";
  page << "</p>\n<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
       << "'>\n<defs><marker id='arrow' viewBox='0 0 10 10' refX='9' refY='5' "
       << "markerWidth='6' markerHeight='6' orient='auto'><path d='M0,0 L10,5 L0,10 z' "
       << "fill='#6a3d9a'/></marker></defs>\n"
       << svg.str() << "</svg>\n";
  for (size_t h = 0; h < sys.hosts.size(); ++h) {
    page << "<pre>" << esc(hostMatrix(sys, static_cast<int>(h))) << "</pre>\n";
  }
  if (plan != nullptr && places != nullptr)
    page << "<pre>" << esc(planText(sys, *places, *plan)) << "</pre>\n";
  page << "</body></html>\n";
  return page.str();
}

}  // namespace topo
}  // namespace xccl
