// Best-first search over executed sets: the C++ port of memsched.schedulers.exact.astar.
//
// States are executed sets (bitsets of ops); f = max(g, h, target) with g the best known path
// peak, h the largest static bound of an op not yet run. States with f >= UB are pruned, ops
// that do not raise live memory and stay within max(g, target) are taken without branching
// (forced moves), and the search is anytime: it stops at a deadline, a state budget, a memory cap
// (bytes held by its own tables, accounted deterministically from their capacities) or when a
// stop flag is raised (Ctrl-C, set from Python), returning the upper-bound order with the proven
// lower bound. Unlike the Python reference it expands partially (PEA*: children above the popped
// f level are not stored; the state is queued again at their smallest f), keeps the open list
// in buckets by (f, depth) and batches table lookups; same optimum and proven bounds, possibly
// a different optimal order among equals.
#ifndef MEMSCHED_PASSES_ASTAR_H_
#define MEMSCHED_PASSES_ASTAR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "problem.h"

namespace memsched {

// Why a search ended.
enum class StopReason : int {
  kDone = 0,         // optimal order found, or nothing below the upper bound (proof complete)
  kTime = 1,         // deadline
  kStates = 2,       // max_states
  kMemory = 3,       // memory_limit
  kInterrupted = 4,  // *stop_flag became non-zero
};

struct SearchResult {
  std::vector<int> order;
  int64_t peak = 0;
  int64_t lower_bound = 0;
  int64_t states = 0;
  int64_t memory_bytes = 0;  // bytes held by the search tables at the end (capacity)
  StopReason reason = StopReason::kDone;
};

struct SearchLimits {
  double time_limit_s = -1;          // < 0: none
  int64_t max_states = -1;           // < 0: none
  int64_t memory_limit = -1;         // bytes; < 0: none
  const int32_t* stop_flag = nullptr;  // polled every 1024 expansions; non-zero: stop
};

// One search to the end or a limit (backward: from the schedule's end, see AstarSearch).
SearchResult Astar(const Problem& p, const std::vector<int>& ub_order, int64_t ub, int64_t target,
                   const SearchLimits& limits, bool backward = false);

// The same search, resumable: each Run goes on from where the previous one stopped (its limits
// apply to that run: max_states counts the run's expansions, time its own clock). `p` must
// outlive the object. Tighten passes in a bound proven or an order found elsewhere.
class AstarSearch {
 public:
  // backward: search from the end of the schedule (states = ops not yet run); same results.
  AstarSearch(const Problem& p, const std::vector<int>& ub_order, int64_t ub, int64_t target,
              bool backward = false);
  ~AstarSearch();
  SearchResult Run(const SearchLimits& limits);
  void Tighten(int64_t target, const std::vector<int>* order, int64_t ub);
  bool finished() const;  // proven: further runs return the same result

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Footprint {
  std::vector<int64_t> steps;  // stable footprint of each step
  std::vector<int64_t> lives;  // live bytes before each step, and after the last
  int64_t peak = 0;
};

// Problem.evaluate; throws std::invalid_argument on an order that is not a topological order.
Footprint Evaluate(const Problem& p, const std::vector<int>& order);

}  // namespace memsched

#endif  // MEMSCHED_PASSES_ASTAR_H_
