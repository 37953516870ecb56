// Loading the network plugin (plugin.h): dlopen, the versioned symbol, init once.
#include "plugin.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

#include "common/error.h"
#include "common/log.h"
#include "common/param.h"

namespace xccl::net {

// The network plugin the pairs on other hosts use (docs/VENDOR.md): unset = libxccl-net.so
// if the loader finds one (a vendor's default install), else the TCP transport; "none" = the
// TCP transport; "socket" = the built-in table; a path or a short name = a shared library.
XCCL_PARAM_STR(NetPlugin, "NET_PLUGIN", "")

constexpr const char* kDefaultPlugin = "libxccl-net.so";

namespace {

const char* currentPluginName = "net";

// The plugin's messages, through libxccl's logger under NET.
void pluginLog(xcclNetLogLevel_t level, const char* fmt, ...) {
  const LogLevel ours = level == XCCL_NET_LOG_WARN   ? LogLevel::kWarn
                        : level == XCCL_NET_LOG_INFO ? LogLevel::kInfo
                                                     : LogLevel::kTrace;
  if (!logEnabled(ours, NET)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  logWrite(ours, NET, strCat("net plugin ", currentPluginName, ": ", buf));
}

bool looksLikePath(const std::string& s) { return s.find('/') != std::string::npos; }

}  // namespace

void check(xcclResult_t r, const char* plugin, const char* what) {
  if (r == xcclSuccess) return;
  const std::string msg = strCat("net plugin ", plugin, ": ", what, " failed (result ", r, ")");
  switch (r) {
    case xcclRemoteError:
      throw RemoteError(msg);
    case xcclInvalidArgument:
      throw InvalidArgument(msg);
    case xcclInvalidUsage:
      throw InvalidUsage(msg);
    case xcclTimeout:
      throw Timeout(msg);
    default:
      throw IoError(msg);
  }
}

const xcclNet_v1_t* loadPlugin(const std::string& nameOrPath) {
  XCCL_CHECK_ARG(!nameOrPath.empty(), "an empty network plugin name");
  const std::string file = looksLikePath(nameOrPath) || nameOrPath == kDefaultPlugin
                               ? nameOrPath
                               : strCat("libxccl-net-", nameOrPath, ".so");
  // RTLD_LOCAL: the plugin's own symbols never interpose on ours, nor ours on its.
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    throw InvalidUsage(strCat("XCCL_NET_PLUGIN=", nameOrPath, ": cannot load '", file,
                              "': ", err ? err : "unknown dlopen error"));
  }
  void* sym = dlsym(lib, XCCL_NET_PLUGIN_SYMBOL);
  if (sym == nullptr) {
    dlclose(lib);
    throw InvalidUsage(strCat("XCCL_NET_PLUGIN=", nameOrPath, ": '", file,
                              "' has no symbol " XCCL_NET_PLUGIN_SYMBOL
                              " (is it an xccl network plugin of this ABI version?)"));
  }
  // The library stays loaded for the process's life: its table is used until exit.
  const auto* table = static_cast<const xcclNet_v1_t*>(sym);
  const void* const fns[] = {reinterpret_cast<const void*>(table->init),
                             reinterpret_cast<const void*>(table->devices),
                             reinterpret_cast<const void*>(table->getProperties),
                             reinterpret_cast<const void*>(table->listen),
                             reinterpret_cast<const void*>(table->connect),
                             reinterpret_cast<const void*>(table->accept),
                             reinterpret_cast<const void*>(table->regMr),
                             reinterpret_cast<const void*>(table->deregMr),
                             reinterpret_cast<const void*>(table->isend),
                             reinterpret_cast<const void*>(table->irecv),
                             reinterpret_cast<const void*>(table->test),
                             reinterpret_cast<const void*>(table->closeSend),
                             reinterpret_cast<const void*>(table->closeRecv),
                             reinterpret_cast<const void*>(table->closeListen)};
  for (const void* f : fns) {
    if (f == nullptr || table->name == nullptr) {
      throw InvalidUsage(strCat("XCCL_NET_PLUGIN=", nameOrPath, ": '", file, "'s ",
                                XCCL_NET_PLUGIN_SYMBOL " table has an empty entry"));
    }
  }
  return table;
}

const xcclNet_v1_t* activePlugin() {
  // Read at each communicator's creation, so one process may hold communicators over
  // different plugins (the benchmarks compare them in the same run); each table is loaded and
  // initialised once, and each answer (a table, none, or why not) is kept per setting.
  struct Answer {
    const xcclNet_v1_t* table = nullptr;
    std::string failure;
  };
  static std::mutex mu;
  static std::map<std::string, Answer> answers;
  static std::set<const xcclNet_v1_t*> initialised;
  std::string want = xcclParamNetPlugin();
  std::lock_guard<std::mutex> g(mu);
  auto it = answers.find(want);
  if (it == answers.end()) {
    Answer a;
    const bool asked = !want.empty();
    std::string name = want;
    bool none = want == "none";
    if (!asked) {
      // Not asked for: a default plugin is used when installed, and anything wrong with it
      // leaves the TCP transport in charge (with a warning when it exists but is broken).
      void* lib = dlopen(kDefaultPlugin, RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        XCCL_INFO(NET, "no network plugin (", kDefaultPlugin,
                  " not found; XCCL_NET_PLUGIN unset): the TCP transport serves other hosts");
        none = true;
      }
      name = kDefaultPlugin;
    }
    if (!none) {
      try {
        const xcclNet_v1_t* t = name == "socket" ? builtinSocketNet() : loadPlugin(name);
        if (!initialised.count(t)) {
          currentPluginName = t->name;
          check(t->init(pluginLog), t->name, "init");
          initialised.insert(t);
        }
        int ndev = 0;
        check(t->devices(&ndev), t->name, "devices");
        if (ndev < 1) {
          throw InvalidUsage(strCat("XCCL_NET_PLUGIN=", name, ": the plugin '", t->name,
                                    "' found no network device on this host"));
        }
        xcclNetProperties_v1_t props{};
        check(t->getProperties(0, &props), t->name, "getProperties");
        props.name[sizeof(props.name) - 1] = '\0';
        props.address[sizeof(props.address) - 1] = '\0';
        XCCL_INFO(NET, "network plugin '", t->name, "' (XCCL_NET_PLUGIN=", name, "): ", ndev,
                  " device(s); device 0 ", props.name, " at ", props.address, ", ", props.speedMbps,
                  " Mbit/s, messages up to ", props.maxMessageBytes, " B");
        a.table = t;
      } catch (const Error& e) {
        if (asked) {
          a.failure = e.what();
        } else {
          XCCL_WARN(NET, "the default network plugin ", kDefaultPlugin,
                    " is unusable, the TCP transport serves other hosts: ", e.what());
        }
      }
    }
    it = answers.emplace(want, a).first;
  }
  if (!it->second.failure.empty()) throw InvalidUsage(it->second.failure);
  return it->second.table;
}

}  // namespace xccl::net
