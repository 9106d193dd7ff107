#pragma once

// How many threads compute on the CPU: LibTorch's intra-op pool and the BLAS
// library's own threads (OpenBLAS runs each matrix product on a pool of its
// own, beside LibTorch's OpenMP team). Left to themselves both take every
// core and oversubscribe them, 3-9x slower (docs/guide/training.md,
// "Threads"). The defaults below were measured on this project's 2-core VM
// (bench/cpu_defaults.py; docs/results/2026-11-28-cpu-defaults.md).

#include <string>

#include "models/models.h"

namespace strata {

struct CpuThreads {
  int torch = 1;  // at::set_num_threads
  int blas = 1;   // the BLAS library's threads
};

// The local trainer's threads for `model` on `cores` cores. `requested` is
// train.threads (0 = choose): a model without convolutions (an MLP: a few
// large matrix products) runs best on one LibTorch thread with the BLAS
// library on every core; a convolutional one on every core with one BLAS
// thread, except the ResNets, which also keep BLAS on every core. With an
// explicit `requested` N, BLAS gets cores / N threads (at least 1; every
// core for a ResNet): a BLAS call runs inside one LibTorch thread's share.
CpuThreads LocalCpuThreads(int requested, Model& model, int cores);

// The number of cores (at least 1).
int CpuCores();

// Sets the BLAS library's thread count for the process, unless the
// environment chose it (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
// OMP_NUM_THREADS set: then nothing changes), or the BLAS is not OpenBLAS.
// Every core, OpenBLAS's own start, is left untouched (a call into its
// thread control measured ResNet-20 5-15% slower).
// Returns what holds now, for the log: "BLAS 1 thread", "BLAS threads from
// OPENBLAS_NUM_THREADS=4", "BLAS threads: not OpenBLAS, left as they are".
std::string SetBlasThreads(int n);

}  // namespace strata
