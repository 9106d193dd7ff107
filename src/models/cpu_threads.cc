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
  auto set = reinterpret_cast<SetFn>(
      ::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set == nullptr) return "BLAS threads: not OpenBLAS, left as they are";
  n = std::max(1, n);
  // Every core is what OpenBLAS starts with when the environment is silent:
  // then it is left untouched. Any call into OpenBLAS's thread control
  // here, even reading the count, measured ResNet-20 5-15% slower.
  if (n == CpuCores())
    return fmt::format("BLAS {} thread{} (OpenBLAS's default)", n,
                       n > 1 ? "s" : "");
  set(n);
  return fmt::format("BLAS {} thread{}", n, n > 1 ? "s" : "");
}

}  // namespace strata
