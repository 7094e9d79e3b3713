// The memory model of python/memsched/memory.py (`Problem`) on plain integer arrays.
//
// A problem arrives as one flat int64 array (built by memsched.native.pack):
//   n, T, base,
//   for each of the n ops:     preds list, creates list, reads list, inplace list, workspace
//   for each of the T tensors: size, initial, pinned, consumers list
// where a "list" is its length followed by its items.
#ifndef MEMSCHED_PASSES_PROBLEM_H_
#define MEMSCHED_PASSES_PROBLEM_H_

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace memsched {

// A set of ops as a runtime-sized bitset (n can exceed 64).
class Bits {
 public:
  Bits() = default;
  explicit Bits(int n) : w_((n + 63) / 64, 0) {}
  bool test(int i) const { return w_[i >> 6] >> (i & 63) & 1; }
  void set(int i) { w_[i >> 6] |= uint64_t(1) << (i & 63); }
  // this is a subset of other
  bool subset_of(const Bits& o) const {
    for (size_t k = 0; k < w_.size(); ++k)
      if (w_[k] & ~o.w_[k]) return false;
    return true;
  }
  int count() const {
    int c = 0;
    for (uint64_t x : w_) c += __builtin_popcountll(x);
    return c;
  }
  const std::vector<uint64_t>& words() const { return w_; }
  std::vector<uint64_t>& words() { return w_; }

 private:
  std::vector<uint64_t> w_;
};

struct Problem {
  int n = 0;
  int T = 0;
  int64_t base = 0;
  std::vector<std::vector<int>> preds, creates, reads, inplace, consumers;
  std::vector<int64_t> workspace, size;
  std::vector<char> initial, pinned;
  int W = 0;                                  // words per op set
  std::vector<uint64_t> pred_rows, cons_rows;  // n x W and T x W bits

  static Problem Unpack(const std::vector<int64_t>& a) {
    size_t i = 0;
    auto next = [&]() -> int64_t {
      if (i >= a.size()) throw std::invalid_argument("memsched.native: truncated problem array");
      return a[i++];
    };
    Problem p;
    p.n = static_cast<int>(next());
    p.T = static_cast<int>(next());
    p.base = next();
    if (p.n < 0 || p.T < 0) throw std::invalid_argument("memsched.native: bad problem header");
    auto list = [&](int bound) {
      int64_t len = next();
      if (len < 0) throw std::invalid_argument("memsched.native: negative list length");
      std::vector<int> out;
      out.reserve(static_cast<size_t>(len));
      for (int64_t k = 0; k < len; ++k) {
        int64_t x = next();
        if (x < 0 || x >= bound) throw std::invalid_argument("memsched.native: index out of range");
        out.push_back(static_cast<int>(x));
      }
      return out;
    };
    p.preds.resize(p.n);
    p.creates.resize(p.n);
    p.reads.resize(p.n);
    p.inplace.resize(p.n);
    p.workspace.resize(p.n);
    for (int v = 0; v < p.n; ++v) {
      p.preds[v] = list(p.n);
      p.creates[v] = list(p.T);
      p.reads[v] = list(p.T);
      p.inplace[v] = list(p.T);
      p.workspace[v] = next();
    }
    p.size.resize(p.T);
    p.initial.resize(p.T);
    p.pinned.resize(p.T);
    p.consumers.resize(p.T);
    for (int t = 0; t < p.T; ++t) {
      p.size[t] = next();
      p.initial[t] = next() != 0;
      p.pinned[t] = next() != 0;
      p.consumers[t] = list(p.n);
      std::sort(p.consumers[t].begin(), p.consumers[t].end());
      p.consumers[t].erase(std::unique(p.consumers[t].begin(), p.consumers[t].end()),
                           p.consumers[t].end());
    }
    if (i != a.size()) throw std::invalid_argument("memsched.native: trailing problem data");
    // predecessor and consumer sets as rows of two contiguous arrays (the search tests them
    // millions of times; one heap block per set cost a cache miss per test)
    p.W = (p.n + 63) / 64;
    p.pred_rows.assign(static_cast<size_t>(p.n) * p.W, 0);
    p.cons_rows.assign(static_cast<size_t>(p.T) * p.W, 0);
    for (int v = 0; v < p.n; ++v)
      for (int u : p.preds[v]) p.pred_rows[static_cast<size_t>(v) * p.W + (u >> 6)] |= uint64_t(1) << (u & 63);
    for (int t = 0; t < p.T; ++t)
      for (int c : p.consumers[t]) p.cons_rows[static_cast<size_t>(t) * p.W + (c >> 6)] |= uint64_t(1) << (c & 63);
    return p;
  }

  // row (W words) is a subset of mask
  bool row_in(const std::vector<uint64_t>& rows, int i, const Bits& mask) const {
    const uint64_t* r = rows.data() + static_cast<size_t>(i) * W;
    const uint64_t* m = mask.words().data();
    for (int k = 0; k < W; ++k)
      if (r[k] & ~m[k]) return false;
    return true;
  }

  // every consumer of t is in mask
  bool all_consumed(int t, const Bits& mask) const { return row_in(cons_rows, t, mask); }

  bool ready(int v, const Bits& mask) const { return !mask.test(v) && row_in(pred_rows, v, mask); }

  int64_t initial_live() const {
    int64_t live = base;
    for (int t = 0; t < T; ++t)
      if (initial[t] && (pinned[t] || !consumers[t].empty())) live += size[t];
    return live;
  }

  // live bytes once every op has run: base and the pinned tensors
  int64_t final_live() const {
    int64_t live = base;
    for (int t = 0; t < T; ++t)
      if (pinned[t]) live += size[t];
    return live;
  }

  // Problem.step: run v from `mask` (v not in mask) with `live` bytes live.
  // `mask_with_v` must be mask | {v}. Returns footprint; sets *after.
  int64_t step(const Bits& mask_with_v, int64_t live, int v, int64_t* after) const {
    int64_t created, freed, credit;
    Effect(v, [&](int t) { return all_consumed(t, mask_with_v); }, &created, &freed, &credit);
    *after = live + created - freed;
    return live + created + workspace[v] - credit;
  }

  // `step` read backwards: `not_run` is the set of ops still to run at the end of the schedule
  // (v not in it), `live` the bytes live once v has run; returns v's footprint and sets *before
  // to the bytes live before v ran.
  int64_t unstep(const Bits& not_run, int64_t live, int v, int64_t* before) const {
    int64_t created, freed, credit;
    // t's last reader has run once v has iff none of its consumers is still to run
    Effect(v, [&](int t) { return disjoint(cons_rows, t, not_run); }, &created, &freed, &credit);
    *before = live - created + freed;
    return *before + created + workspace[v] - credit;
  }

  // What running v does to memory, given `read_done(t)`: every consumer of t has run once v
  // has. Bytes v creates, bytes freed right after it, and the in-place credit (an output
  // written over the first dying in-place input).
  template <typename ReadDone>
  void Effect(int v, ReadDone read_done, int64_t* created, int64_t* freed,
              int64_t* credit) const {
    *created = *freed = *credit = 0;
    for (int t : creates[v]) {
      *created += size[t];
      if (!pinned[t] && consumers[t].empty()) *freed += size[t];
    }
    for (int t : reads[v])
      if (!pinned[t] && read_done(t)) *freed += size[t];
    for (int t : inplace[v]) {
      if (!pinned[t] && read_done(t)) {
        *credit = std::min(size[t], *created);
        break;
      }
    }
  }

  // row (W words) shares no bit with mask
  bool disjoint(const std::vector<uint64_t>& rows, int i, const Bits& mask) const {
    const uint64_t* r = rows.data() + static_cast<size_t>(i) * W;
    const uint64_t* m = mask.words().data();
    for (int k = 0; k < W; ++k)
      if (r[k] & m[k]) return false;
    return true;
  }

  int64_t static_bound(int v) const {
    int64_t created = 0, reads_b = 0, credit = 0;
    for (int t : creates[v]) created += size[t];
    for (int t : reads[v]) reads_b += size[t];
    for (int t : inplace[v])
      if (!pinned[t]) credit = std::max(credit, std::min(size[t], created));
    return base + reads_b + created + workspace[v] - credit;
  }
};

}  // namespace memsched

#endif  // MEMSCHED_PASSES_PROBLEM_H_
