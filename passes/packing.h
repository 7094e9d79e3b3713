// Exact arena packing (dynamic storage allocation) in the manner of MiniMalloc
// (M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
// Learning", ASPLOS 2023), written here from the paper's ideas, not from its code.
//
// Buffers have a size (> 0, in units) and a half-open range [lo, hi) of time sections (time
// already compressed to the event points). A packing gives every buffer an offset such that two
// buffers sharing a section never share memory. The search is a depth-first search over
// *canonical* solutions: buffers are placed in order of non-decreasing offset (equal offsets by
// increasing index), each at the lowest offset on top of the already placed buffers it meets in
// time. Every feasible instance has such a solution (let every buffer fall down; then sort by
// offset), so the search is complete. Pruning and inference:
//   * section bound: in every section, the unplaced bytes stacked from the lowest level any of
//     them can still reach (its floor, the current offset, their own lowest offsets) must fit;
//   * decomposition: unplaced buffers that split into groups disjoint in time are solved one
//     group after the other (a failure in one never re-opens another);
//   * a buffer that meets no other unplaced buffer ("hatless") is placed at once, no branching;
//   * equal buffers (same sections and size) are tried once per node;
//   * failed states (unplaced set + floors of the sections still in use + current offset) are
//     remembered in a table and never searched twice;
//   * among buffers at the same offset, a static priority (area, size, duration or start, and
//     optionally "buffers of the fullest sections first") decides; restarts alternate between
//     these priorities and randomly perturbed ones with growing node budgets (see Portfolio).
#ifndef MEMSCHED_PASSES_PACKING_H_
#define MEMSCHED_PASSES_PACKING_H_

#include <cstdint>
#include <vector>

namespace memsched {

struct PackProblem {
  int num_sections = 0;
  std::vector<int> lo, hi;     // section range [lo, hi) of each buffer, 0 <= lo < hi <= sections
  std::vector<int64_t> size;   // > 0
  std::vector<int64_t> times;  // optional: time of each section boundary (num_sections + 1),
                               // for the branching priority (area = size x duration)
};

struct PackLimits {
  double time_limit_s = -1;            // < 0: none
  int64_t max_nodes = -1;              // < 0: none
  const int32_t* stop_flag = nullptr;  // polled every 1024 nodes; non-zero: stop
};

enum class PackStop : int { kDone = 0, kTime = 1, kNodes = 2, kInterrupted = 3 };

struct PackResult {
  std::vector<int64_t> offsets;  // best packing found (empty when none within the capacity)
  int64_t arena = -1;            // its arena; -1 when none
  int64_t lower_bound = 0;       // proven: no packing has a smaller arena
  int64_t nodes = 0;
  PackStop reason = PackStop::kDone;
};

// capacity >= 0: find a packing within `capacity` (stops at the first one; lower_bound becomes
// capacity + 1 when the search proves there is none). capacity < 0: minimise the arena, from the
// `initial` packing (may be empty) down to `lower_bound` (a proven bound, e.g. the liveness
// peak); anytime. Deterministic for the same input and node budget.
PackResult Pack(const PackProblem& p, int64_t capacity, int64_t lower_bound,
                const std::vector<int64_t>& initial, const PackLimits& limits);

}  // namespace memsched

#endif  // MEMSCHED_PASSES_PACKING_H_
