// The network plugin seam (include/xccl_net.h): which table serves the remote pairs, loaded
// once per process. XCCL_NET_PLUGIN unset: libxccl-net.so when the dynamic loader finds one
// (as NCCL looks for libnccl-net.so), else none; "none": none (the TCP transport, tcp/);
// "socket": the built-in table (socket_net.cc, libxccl's own sockets behind the ABI);
// anything else: a shared library, a path or a short name NAME (libxccl-net-NAME.so).
#pragma once

#include <string>

#include "xccl_net.h"

namespace xccl::net {

// The table the remote pairs use, initialised; nullptr for none. Throws InvalidUsage naming
// the file or the symbol when the plugin XCCL_NET_PLUGIN asks for cannot be loaded or fails
// its init (no fallback: the user asked for it); an unusable default is a warning and none.
const xcclNet_v1_t* activePlugin();

// The built-in table over libxccl's sockets (not initialised).
const xcclNet_v1_t* builtinSocketNet();

// Loads a table from a shared library (path or short name) without caching; for tests.
const xcclNet_v1_t* loadPlugin(const std::string& nameOrPath);

// A failing call of a plugin function as an exception of the library's error idiom.
void check(xcclResult_t r, const char* plugin, const char* what);

}  // namespace xccl::net
