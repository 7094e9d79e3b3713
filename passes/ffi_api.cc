// tvm-ffi entry points of libmemsched_native and memsched's PassContext config keys.
//
//   memsched.native.astar(problem, ub_order, ub, target, time_limit_s, max_states,
//                         memory_limit, stop_flag_address, backward)
//       -> [peak, lower_bound, states, stop_reason, memory_bytes, order...]
//       (negative limits: none; stop_flag_address: address of an int32 polled every 1024
//        expansions, 0 for none; stop_reason: see StopReason in astar.h)
//   memsched.native.evaluate(problem, order) -> [peak, steps (n)..., lives (n + 1)...]
//   memsched.native.register_pass_config() -> bool   (idempotent)
//   memsched.native.version() -> str
//
// `problem` is the flat int64 array described in problem.h.
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include "astar.h"
#include "problem.h"

namespace memsched {
namespace {

namespace ffi = tvm::ffi;

std::vector<int64_t> ToVector(const ffi::Array<int64_t>& a) {
  std::vector<int64_t> out;
  out.reserve(a.size());
  for (int64_t x : a) out.push_back(x);
  return out;
}

std::vector<int> ToOrder(const ffi::Array<int64_t>& a) {
  std::vector<int> out;
  out.reserve(a.size());
  for (int64_t x : a) out.push_back(static_cast<int>(x));
  return out;
}

Problem UnpackOrThrow(const ffi::Array<int64_t>& a) {
  try {
    return Problem::Unpack(ToVector(a));
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

ffi::Array<int64_t> AstarFn(ffi::Array<int64_t> problem, ffi::Array<int64_t> ub_order, int64_t ub,
                            int64_t target, double time_limit_s, int64_t max_states,
                            int64_t memory_limit, int64_t stop_flag_address, bool backward) {
  Problem p = UnpackOrThrow(problem);
  std::vector<int> order = ToOrder(ub_order);
  if (static_cast<int>(order.size()) != p.n)
    TVM_FFI_THROW(ValueError) << "upper-bound order has " << order.size() << " ops, problem has "
                              << p.n;
  SearchLimits limits;
  limits.time_limit_s = time_limit_s;
  limits.max_states = max_states;
  limits.memory_limit = memory_limit;
  limits.stop_flag = reinterpret_cast<const int32_t*>(static_cast<intptr_t>(stop_flag_address));
  SearchResult r = Astar(p, order, ub, target, limits, backward);
  std::vector<int64_t> out = {r.peak, r.lower_bound, r.states, static_cast<int64_t>(r.reason),
                              r.memory_bytes};
  out.insert(out.end(), r.order.begin(), r.order.end());
  return ffi::Array<int64_t>(out.begin(), out.end());
}

// Resumable searches (AstarSearch) by handle: open, run (again and again), close. A handle
// owns its problem and its tables (possibly GiBs) until closed.
struct Session {
  Problem p;
  std::unique_ptr<AstarSearch> search;
  std::mutex mu;  // one run at a time per session
};
std::mutex g_sessions_mu;
std::map<int64_t, std::shared_ptr<Session>> g_sessions;
int64_t g_next_session = 1;

std::shared_ptr<Session> FindSession(int64_t handle) {
  std::lock_guard<std::mutex> lock(g_sessions_mu);
  auto it = g_sessions.find(handle);
  if (it == g_sessions.end()) TVM_FFI_THROW(ValueError) << "no open search " << handle;
  return it->second;
}

ffi::Array<int64_t> ResultArray(const SearchResult& r) {
  std::vector<int64_t> out = {r.peak, r.lower_bound, r.states, static_cast<int64_t>(r.reason),
                              r.memory_bytes};
  out.insert(out.end(), r.order.begin(), r.order.end());
  return ffi::Array<int64_t>(out.begin(), out.end());
}

int64_t AstarOpenFn(ffi::Array<int64_t> problem, ffi::Array<int64_t> ub_order, int64_t ub,
                    int64_t target, bool backward) {
  auto s = std::make_shared<Session>();
  s->p = UnpackOrThrow(problem);
  std::vector<int> order = ToOrder(ub_order);
  if (static_cast<int>(order.size()) != s->p.n)
    TVM_FFI_THROW(ValueError) << "upper-bound order has " << order.size() << " ops, problem has "
                              << s->p.n;
  s->search.reset(new AstarSearch(s->p, order, ub, target, backward));
  std::lock_guard<std::mutex> lock(g_sessions_mu);
  int64_t h = g_next_session++;
  g_sessions[h] = s;
  return h;
}

ffi::Array<int64_t> AstarRunFn(int64_t handle, int64_t target, ffi::Array<int64_t> ub_order,
                               int64_t ub, double time_limit_s, int64_t max_states,
                               int64_t memory_limit, int64_t stop_flag_address) {
  std::shared_ptr<Session> s = FindSession(handle);
  std::lock_guard<std::mutex> lock(s->mu);
  std::vector<int> order = ToOrder(ub_order);
  if (!order.empty() && static_cast<int>(order.size()) != s->p.n)
    TVM_FFI_THROW(ValueError) << "upper-bound order has " << order.size() << " ops, problem has "
                              << s->p.n;
  s->search->Tighten(target, order.empty() ? nullptr : &order, ub);
  SearchLimits limits;
  limits.time_limit_s = time_limit_s;
  limits.max_states = max_states;
  limits.memory_limit = memory_limit;
  limits.stop_flag = reinterpret_cast<const int32_t*>(static_cast<intptr_t>(stop_flag_address));
  return ResultArray(s->search->Run(limits));
}

bool AstarCloseFn(int64_t handle) {
  std::shared_ptr<Session> s;
  {
    std::lock_guard<std::mutex> lock(g_sessions_mu);
    auto it = g_sessions.find(handle);
    if (it == g_sessions.end()) return false;
    s = it->second;
    g_sessions.erase(it);
  }
  std::lock_guard<std::mutex> lock(s->mu);  // a run still going finishes first
  return true;
}

ffi::Array<int64_t> EvaluateFn(ffi::Array<int64_t> problem, ffi::Array<int64_t> order) {
  Problem p = UnpackOrThrow(problem);
  Footprint fp;
  try {
    fp = Evaluate(p, ToOrder(order));
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << e.what();
  }
  std::vector<int64_t> out = {fp.peak};
  out.insert(out.end(), fp.steps.begin(), fp.steps.end());
  out.insert(out.end(), fp.lives.begin(), fp.lives.end());
  return ffi::Array<int64_t>(out.begin(), out.end());
}

// ---------------------------------------------------------------- PassContext config keys
//
// `tvm::transform::PassContext::RegisterConfigOption(const char*, ffi::String,
// std::function<ffi::Any(ffi::Any)>)` is exported by libtvm_compiler, but the tvm wheel ships no
// compiler headers and loads libtvm_compiler RTLD_LOCAL. We therefore find the already loaded
// library, look the symbol up by its mangled name and call it: the same thing
// TVM_REGISTER_PASS_CONFIG_OPTION expands to, without a link-time dependency on TVM (the library
// also works with tvm-ffi alone; the keys then simply do not exist).
using RegisterConfigOptionFn = void (*)(const char*, ffi::String,
                                        std::function<ffi::Any(ffi::Any)>);
constexpr const char* kRegisterSymbol =
    "_ZN3tvm9transform11PassContext20RegisterConfigOptionEPKcNS_3ffi6StringESt8functionIFNS4_"
    "3AnyES7_EE";

int FindCompiler(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name != nullptr) {
    size_t len = std::strlen(name);
    const char* want = "libtvm_compiler.so";
    size_t wl = std::strlen(want);
    if (len >= wl && std::strcmp(name + len - wl, want) == 0) {
      *static_cast<std::string*>(out) = name;
      return 1;
    }
  }
  return 0;
}

RegisterConfigOptionFn LookupRegister() {
  if (void* sym = dlsym(RTLD_DEFAULT, kRegisterSymbol))
    return reinterpret_cast<RegisterConfigOptionFn>(sym);
  std::string path;
  dl_iterate_phdr(FindCompiler, &path);
  if (path.empty()) return nullptr;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<RegisterConfigOptionFn>(dlsym(handle, kRegisterSymbol));
}

template <typename T>
std::function<ffi::Any(ffi::Any)> Legalize(std::string key, std::string type) {
  return [key, type](ffi::Any value) -> ffi::Any {
    std::optional<T> v = value.try_cast<T>();
    if (!v.has_value())
      TVM_FFI_THROW(AttributeError) << "Expect config " << key << " to have type " << type
                                    << ", but instead get " << value.GetTypeKey();
    return ffi::Any(*v);
  };
}

std::mutex g_config_mu;
bool g_config_registered = false;

bool RegisterPassConfig() {
  std::lock_guard<std::mutex> lock(g_config_mu);
  if (g_config_registered) return true;
  RegisterConfigOptionFn reg = LookupRegister();
  if (reg == nullptr) return false;
  reg("memsched.algorithm", ffi::String("str"), Legalize<ffi::String>("memsched.algorithm", "str"));
  reg("memsched.memory_model", ffi::String("str"),
      Legalize<ffi::String>("memsched.memory_model", "str"));
  reg("memsched.time_limit_s", ffi::String("float"),
      Legalize<double>("memsched.time_limit_s", "float"));
  reg("memsched.memory_limit", ffi::String("int"), Legalize<int64_t>("memsched.memory_limit", "int"));
  g_config_registered = true;
  return true;
}

}  // namespace
}  // namespace memsched

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("memsched.native.astar", memsched::AstarFn,
           "Exact min-peak search on one (sub-)problem: [peak, lower_bound, states, stop_reason, "
           "memory_bytes, order...]")
      .def("memsched.native.astar_open", memsched::AstarOpenFn,
           "Open a resumable search (problem, order, its peak, target, backward): a handle for "
           "astar_run / astar_close")
      .def("memsched.native.astar_run", memsched::AstarRunFn,
           "Go on with an open search (target, better order or [] and its peak, limits): the "
           "result array of memsched.native.astar")
      .def("memsched.native.astar_close", memsched::AstarCloseFn,
           "Free an open search's tables; false if the handle was not open")
      .def("memsched.native.evaluate", memsched::EvaluateFn,
           "Footprint of an order: [peak, steps..., lives...]")
      .def("memsched.native.register_pass_config", memsched::RegisterPassConfig,
           "Register the memsched.* PassContext config keys (needs TVM loaded); idempotent")
      .def("memsched.native.version", []() { return tvm::ffi::String("memsched-native 0.4.0"); });
  // If TVM is already loaded (the normal case: memsched.native imports tvm first), the config
  // keys exist as soon as the library is loaded.
  memsched::RegisterPassConfig();
}
