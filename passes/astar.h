// Best-first search over executed sets: the C++ port of memsched.schedulers.exact.astar.
//
// States are executed sets (bitsets of ops); f = max(g, h, target) with g the best known path
// peak, h the largest static bound of an op not yet run. States with f >= UB are pruned, ops
// that do not raise live memory and stay within max(g, target) are taken without branching
// (forced moves), and the search is anytime under a time / state limit.
#ifndef MEMSCHED_PASSES_ASTAR_H_
#define MEMSCHED_PASSES_ASTAR_H_

#include <cstdint>
#include <vector>

#include "problem.h"

namespace memsched {

struct SearchResult {
  std::vector<int> order;
  int64_t peak = 0;
  int64_t lower_bound = 0;
  int64_t states = 0;
};

// time_limit_s < 0: no limit; max_states < 0: no limit.
SearchResult Astar(const Problem& p, const std::vector<int>& ub_order, int64_t ub, int64_t target,
                   double time_limit_s, int64_t max_states);

struct Footprint {
  std::vector<int64_t> steps;  // stable footprint of each step
  std::vector<int64_t> lives;  // live bytes before each step, and after the last
  int64_t peak = 0;
};

// Problem.evaluate; throws std::invalid_argument on an order that is not a topological order.
Footprint Evaluate(const Problem& p, const std::vector<int>& order);

}  // namespace memsched

#endif  // MEMSCHED_PASSES_ASTAR_H_
