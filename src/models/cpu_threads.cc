#include "models/cpu_threads.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "common/log.h"

namespace strata {
namespace {

bool HasConvolutions(Model& model) {
  for (const torch::Tensor& p : model.net->parameters())
    if (p.dim() == 4) return true;  // [out, in, kh, kw]
  return false;
}

bool IsResNet(const Model& model) { return model.name.rfind("resnet", 0) == 0; }

}  // namespace

int CpuCores() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

CpuThreads LocalCpuThreads(int requested, Model& model, int cores) {
  const bool conv = HasConvolutions(model);
  CpuThreads t;
  t.torch = requested > 0 ? requested : (conv ? cores : 1);
  if (IsResNet(model))
    t.blas = cores;
  else if (requested > 0 || !conv)
    t.blas = std::max(1, cores / t.torch);
  else
    t.blas = 1;
  return t;
}

std::string SetBlasThreads(int n) {
  for (const char* var :
       {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0')
      return fmt::format("BLAS threads from {}={}", var, v);
  }
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  auto set = reinterpret_cast<SetFn>(
      ::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetFn>(
      ::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (set == nullptr || get == nullptr)
    return "BLAS threads: not OpenBLAS, left as they are";
  n = std::max(1, n);
  // Set only when it changes: re-setting the count OpenBLAS started with
  // measured 4-8% slower on ResNet-20 (its thread server is reconfigured).
  if (get() != n) set(n);
  return fmt::format("BLAS {} thread{}", n, n > 1 ? "s" : "");
}

}  // namespace strata
