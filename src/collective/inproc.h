#pragma once

// Collectives through memory between the threads of one process (the
// embedded default's workers): every member publishes its buffer, then each
// reduces its own slice from all the buffers and copies the others' slices,
// between barriers. No sockets and no copies beyond the reduction itself;
// sums are taken in rank order, so a result does not depend on timing.

#include <map>
#include <memory>
#include <string>

#include "collective/collective.h"
#include "common/mutex.h"

namespace strata {

class InprocGroup;

// Where the threads of one process meet to form groups (one hub per run,
// owned by the launcher and lent to every node it starts as a thread).
// Thread-safe.
class CollectiveHub {
 public:
  CollectiveHub();
  ~CollectiveHub();
  CollectiveHub(const CollectiveHub&) = delete;
  CollectiveHub& operator=(const CollectiveHub&) = delete;

  // Joins the group named options.prefix as options.rank of options.size,
  // and waits (up to options.timeout) until every member has joined. A
  // rank that joins a group it is already in starts a new group under the
  // name (a re-formed group; the old one's members see it as left).
  // InvalidArgument for a bad rank or a size that differs from the
  // group's; DeadlineExceeded naming who is missing.
  Result<std::unique_ptr<Collective>> Join(const CollectiveOptions& options);

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<InprocGroup>> groups_ GUARDED_BY(mu_);
};

}  // namespace strata
