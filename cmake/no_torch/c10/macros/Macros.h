// Put first on the include path of every LibTorch-free library (src/
// CMakeLists.txt, strata_torch_free): nearly every LibTorch header (torch/,
// ATen/, c10/) includes this one, so a LibTorch include reaching such a
// library fails the build here, naming the file that reached it.
#error \
    "LibTorch included in a LibTorch-free library (see docs/design/architecture.md, Module map): move the code that needs it to src/models, src/worker or src/launch"
