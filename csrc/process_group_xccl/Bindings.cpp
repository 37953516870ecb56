// Bindings.cpp — the pybind11 module torch_xccl._C: the backend factory the Python routing
// registers, introspection helpers, and the flight recorder's dump.
#include <chrono>

#include <pybind11/chrono.h>
#include <torch/extension.h>

#include "FlightDump.hpp"
#include "FlightRecorder.hpp"
#include "ProcessGroupXCCL.hpp"

namespace torch_xccl {
void bindPeerMemory(py::module& m);  // PeerMemory.cpp
void bindDirect(py::module& m);      // Direct.cpp
}  // namespace torch_xccl

namespace {
torch_xccl::ProcessGroupXCCL& asXccl(const c10::intrusive_ptr<c10d::Backend>& b) {
  auto* p = dynamic_cast<torch_xccl::ProcessGroupXCCL*>(b.get());
  TORCH_CHECK(p != nullptr, "not an xccl backend: ", b ? b->getBackendName() : "None");
  return *p;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "torch_xccl native module: the xccl c10d backend over libxccl";
  using torch_xccl::ProcessGroupXCCL;
  // The backend's Python type: a torch Backend plus what torch's split paths look up by name
  // on a splittable backend (ProcessGroupNCCL has the same three).
  auto backend = py::class_<ProcessGroupXCCL, c10d::Backend, c10::intrusive_ptr<ProcessGroupXCCL>>(
      m, "ProcessGroupXCCL");
  py::class_<ProcessGroupXCCL::Options, c10d::Backend::Options,
             c10::intrusive_ptr<ProcessGroupXCCL::Options>>(backend, "Options")
      .def(py::init<>())
      .def("__copy__",
           [](const ProcessGroupXCCL::Options& o) {
             return c10::make_intrusive<ProcessGroupXCCL::Options>(o);
           })
      .def("__deepcopy__", [](const ProcessGroupXCCL::Options& o, py::dict) {
        return c10::make_intrusive<ProcessGroupXCCL::Options>(o);
      });
  backend
      .def_property_readonly("options",
                             [](ProcessGroupXCCL& self) {
                               return c10::static_intrusive_pointer_cast<ProcessGroupXCCL::Options>(
                                   self.getBackendOptions());
                             })
      .def("comm_split_count", &ProcessGroupXCCL::splitCount)
      // Non-members of a new group do nothing: members rendezvous through the store.
      .def("perform_nocolor_split", [](ProcessGroupXCCL&, const at::Device&) {})
      .def("_device_comm_device", &ProcessGroupXCCL::deviceCommDevice);
  m.def(
      "_create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout, const std::string& groupName,
         const std::vector<uint64_t>& globalRanks, bool reportStreamErrors) {
        return torch_xccl::createProcessGroupXCCL(store, rank, size, timeout, groupName,
                                                  globalRanks, reportStreamErrors);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("group_name") = "", py::arg("global_ranks_in_group") = std::vector<uint64_t>{},
      py::arg("report_stream_errors") = false, py::call_guard<py::gil_scoped_release>());
  m.def("xccl_version", [] {
    int v = 0;
    xcclResult_t r = xcclGetVersion(&v);
    TORCH_CHECK(r == xcclSuccess, "xcclGetVersion: ", xcclGetErrorString(r));
    return v;
  });
  m.def("xccl_header_version", [] { return XCCL_VERSION_CODE; });
  m.def("_stop_completion_threads_before_exit",
        &torch_xccl::ProcessGroupXCCL::stopCompletionThreadsBeforeExit,
        py::call_guard<py::gil_scoped_release>(),
        "End every backend's completion thread before the interpreter finalizes (atexit)");
  m.def("_describe",
        [](const c10::intrusive_ptr<c10d::Backend>& b) { return asXccl(b).describe(); });
  m.def(
      "_probe_alive",
      [](const c10::intrusive_ptr<c10d::Backend>& b, int64_t timeoutMs) {
        return asXccl(b).probeAlive(timeoutMs);
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_revoke", [](const c10::intrusive_ptr<c10d::Backend>& b) { asXccl(b).revoke(); },
      py::call_guard<py::gil_scoped_release>());
  m.def("_abandon_coalescing",
        [](const c10::intrusive_ptr<c10d::Backend>& b, const std::string& why) {
          auto& pg = asXccl(b);
          if (pg.coalescing()) pg.abandonCoalescing(why);
        });
  m.def("_is_xccl_backend", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    return dynamic_cast<torch_xccl::ProcessGroupXCCL*>(b.get()) != nullptr;
  });
  // The flight recorder (FlightDump.hpp): its JSON, and a dump to a file.
  m.def(
      "_flight_record_json",
      [](const std::string& reason) { return torch_xccl::flight::json(reason); },
      py::arg("reason") = "torch_xccl.flight_record()", py::call_guard<py::gil_scoped_release>());
  m.def(
      "_dump_flight_record",
      [](const std::string& path, const std::string& reason) {
        return torch_xccl::flight::dump(path, reason);
      },
      py::arg("path") = "", py::arg("reason") = "torch_xccl.dump_flight_record()",
      py::call_guard<py::gil_scoped_release>());
  m.def("_flight_record_default_path", [] { return torch_xccl::flight::defaultPath(); });
  // What recording costs: `iters` record + retire pairs of an op on `inputs` / `outputs` in a
  // recorder of its own (the process's is left alone). Returns ns per pair.
  m.def(
      "_flight_recorder_cost",
      [](int64_t iters, const std::vector<at::Tensor>& inputs,
         const std::vector<at::Tensor>& outputs, int64_t capacity) {
        torch_xccl::FlightRecorder rec(static_cast<size_t>(capacity));
        torch_xccl::FlightGroup g;
        g.name = "cost";
        g.size = 1;
        const uint32_t group = rec.addGroup(g);
        torch_xccl::FlightIssue issue;
        issue.group = group;
        issue.op = "allreduce";
        issue.inputs = inputs;
        issue.outputs = outputs;
        auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < iters; ++i) {
          issue.seq = issue.opSeq = static_cast<uint64_t>(i + 1);
          rec.retire(rec.record(issue), nullptr, false);
        }
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
        return static_cast<double>(ns) / static_cast<double>(iters);
      },
      py::arg("iters"), py::arg("inputs"), py::arg("outputs"), py::arg("capacity") = 2000,
      py::call_guard<py::gil_scoped_release>());
  torch_xccl::bindPeerMemory(m);
  torch_xccl::bindDirect(m);
}
