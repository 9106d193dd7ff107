#pragma once

// Clang's thread-safety annotations (-Wthread-safety), as macros that are
// empty for other compilers. A field names the mutex that guards it
// (GUARDED_BY), a function the mutex it needs held (REQUIRES) or must not
// hold (EXCLUDES); scripts/thread_safety.sh compiles src/ with clang and
// -Wthread-safety -Werror, so a field read without its lock fails CI.
// Use them with the annotated Mutex of common/mutex.h: std::mutex itself
// carries no annotations in libstdc++.

#if defined(__clang__)
#define STRATA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define STRATA_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) STRATA_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY STRATA_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) STRATA_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) STRATA_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) \
  STRATA_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) \
  STRATA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) STRATA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) STRATA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) \
  STRATA_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) \
  STRATA_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) \
  STRATA_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define RELEASE(...) STRATA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) \
  STRATA_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) STRATA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) STRATA_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) STRATA_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS \
  STRATA_THREAD_ANNOTATION(no_thread_safety_analysis)
