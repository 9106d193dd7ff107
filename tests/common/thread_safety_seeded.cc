// A seeded violation for scripts/thread_safety.sh: the script compiles this
// file with clang's -Wthread-safety -Werror first and fails if it compiles
// cleanly (the check would then be switched off, e.g. by a macro that
// expands to nothing, a flag lost on the way, or a compiler that is not
// clang). Not part of any test binary (the tests are *_test.cc).

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace strata {
namespace {

struct Seeded {
  Mutex mu_;
  int x_ GUARDED_BY(mu_) = 0;

  // The violation: writes x_ without holding mu_.
  void WriteUnlocked() { x_ = 1; }
};

}  // namespace

void ThreadSafetySeededViolation() {
  Seeded s;
  s.WriteUnlocked();
}

}  // namespace strata
