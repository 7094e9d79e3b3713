#include "astar.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace memsched {
namespace {

// All states' bitsets live in one pool (W words each); an open-addressing table maps a bitset
// to its state index.
class StateTable {
 public:
  explicit StateTable(int words) : W_(words) { table_.assign(1 << 12, -1); }

  int size() const { return static_cast<int>(g.size()); }
  const uint64_t* key(int s) const { return pool_.data() + static_cast<size_t>(s) * W_; }

  // index of the state with this bitset, or -1
  int find(const uint64_t* k) const {
    size_t mask = table_.size() - 1;
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      int s = table_[i];
      if (s < 0) return -1;
      if (std::equal(k, k + W_, key(s))) return s;
    }
  }

  int insert(const uint64_t* k, int64_t g0, int64_t live0, int par, int op) {
    if (static_cast<size_t>(size() + 1) * 2 > table_.size()) grow();
    int s = size();
    pool_.insert(pool_.end(), k, k + W_);
    g.push_back(g0);
    live.push_back(live0);
    parent.push_back(par);
    via.push_back(op);
    place(s);
    return s;
  }

  // bytes held (capacities, not sizes: what is really allocated)
  size_t bytes() const {
    return pool_.capacity() * sizeof(uint64_t) + table_.capacity() * sizeof(int) +
           (g.capacity() + live.capacity()) * sizeof(int64_t) +
           (parent.capacity() + via.capacity()) * sizeof(int);
  }

  std::vector<int64_t> g, live;
  std::vector<int> parent, via;

 private:
  size_t hash(const uint64_t* k) const {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < W_; ++i) {
      h ^= k[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    }
    return static_cast<size_t>(h ^ (h >> 33));
  }
  void place(int s) {
    size_t mask = table_.size() - 1;
    size_t i = hash(key(s)) & mask;
    while (table_[i] >= 0) i = (i + 1) & mask;
    table_[i] = s;
  }
  void grow() {
    table_.assign(table_.size() * 2, -1);
    for (int s = 0; s < size(); ++s) place(s);
  }

  int W_;
  std::vector<uint64_t> pool_;
  std::vector<int> table_;
};

struct Entry {
  int64_t f;
  int depth;
  int64_t g;
  int state;
  // std heap functions build a max-heap: "less" means popped later.
  bool operator<(const Entry& o) const {
    if (f != o.f) return f > o.f;
    if (depth != o.depth) return depth < o.depth;  // deeper first
    if (g != o.g) return g > o.g;
    return state > o.state;
  }
};

// A binary heap on a vector we can measure (std::priority_queue hides its capacity).
class Heap {
 public:
  bool empty() const { return v_.empty(); }
  const Entry& top() const { return v_.front(); }
  void push(const Entry& e) {
    v_.push_back(e);
    std::push_heap(v_.begin(), v_.end());
  }
  void pop() {
    std::pop_heap(v_.begin(), v_.end());
    v_.pop_back();
  }
  size_t bytes() const { return v_.capacity() * sizeof(Entry); }

 private:
  std::vector<Entry> v_;
};

}  // namespace

SearchResult Astar(const Problem& p, const std::vector<int>& ub_order, int64_t ub, int64_t target,
                   const SearchLimits& limits) {
  const int n = p.n;
  SearchResult res;
  res.order = ub_order;
  res.peak = ub;
  if (ub <= target || n == 0) {
    res.lower_bound = std::max(ub, target);
    return res;
  }
  using Clock = std::chrono::steady_clock;
  const bool timed = limits.time_limit_s >= 0;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(
                                          timed ? std::min(limits.time_limit_s, 1e9) : 0.0));

  std::vector<int64_t> stat(n);
  for (int v = 0; v < n; ++v) stat[v] = p.static_bound(v);
  std::vector<int> by_static(n);
  for (int v = 0; v < n; ++v) by_static[v] = v;
  std::stable_sort(by_static.begin(), by_static.end(),
                   [&](int a, int b) { return stat[a] > stat[b]; });
  auto h = [&](const Bits& m) -> int64_t {
    for (int v : by_static)
      if (!m.test(v)) return stat[v];
    return 0;
  };

  const int W = (n + 63) / 64;
  StateTable st(W);
  Bits full(n);
  for (int v = 0; v < n; ++v) full.set(v);
  auto is_full = [&](const Bits& m) { return m.words() == full.words(); };

  Bits mask(n), child(n);
  st.insert(mask.words().data(), 0, p.initial_live(), -1, -1);
  Heap heap;
  int64_t lower = std::max(h(mask), target);
  heap.push({lower, 0, 0, 0});
  int64_t states = 0;
  bool exhausted = true;

  auto load = [&](int s, Bits* m) {
    const uint64_t* k = st.key(s);
    std::copy(k, k + W, m->words().begin());
  };
  // Limits are polled every 1024 expansions: deterministic for states and memory (capacities
  // grow identically on every run), a clock read and a flag load for time and Ctrl-C.
  auto stop_reason = [&]() -> StopReason {
    if (limits.stop_flag != nullptr && __atomic_load_n(limits.stop_flag, __ATOMIC_RELAXED) != 0)
      return StopReason::kInterrupted;
    if (limits.max_states >= 0 && states >= limits.max_states) return StopReason::kStates;
    if (limits.memory_limit >= 0 &&
        static_cast<int64_t>(st.bytes() + heap.bytes()) >= limits.memory_limit)
      return StopReason::kMemory;
    if (timed && Clock::now() >= end) return StopReason::kTime;
    return StopReason::kDone;
  };

  while (!heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    int s = e.state;
    int64_t g = e.g;
    if (st.g[s] < g) continue;  // stale
    if (e.f >= ub) {
      lower = ub;
      exhausted = false;
      break;
    }
    lower = e.f;
    load(s, &mask);
    if (is_full(mask)) {
      std::vector<int> order;
      for (int x = s; st.parent[x] >= 0; x = st.parent[x]) order.push_back(st.via[x]);
      std::reverse(order.begin(), order.end());
      res.order = std::move(order);
      res.peak = g;
      res.lower_bound = e.f;
      res.states = states;
      res.memory_bytes = static_cast<int64_t>(st.bytes() + heap.bytes());
      return res;
    }
    ++states;
    if ((states & 1023) == 0) {
      StopReason why = stop_reason();
      if (why != StopReason::kDone) {
        res.reason = why;
        exhausted = false;
        break;
      }
    }
    int64_t live = st.live[s];
    const int64_t limit = std::max(g, target);
    // Forced moves (dominance).
    bool dominated = false;
    bool forced = true;
    while (forced && !is_full(mask)) {
      forced = false;
      for (int v = 0; v < n; ++v) {
        if (!p.ready(v, mask)) continue;
        child = mask;
        child.set(v);
        int64_t after;
        int64_t foot = p.step(child, live, v, &after);
        if (after <= live && foot <= limit) {
          g = std::max(g, foot);
          int c = st.find(child.words().data());
          if (c >= 0) {
            if (st.g[c] <= g) {
              dominated = true;
              break;
            }
            st.g[c] = g;
            st.parent[c] = s;
            st.via[c] = v;
            st.live[c] = after;
          } else {
            c = st.insert(child.words().data(), g, after, s, v);
          }
          s = c;
          mask = child;
          live = after;
          forced = true;
          break;
        }
      }
      if (dominated) break;
    }
    if (dominated) continue;
    if (is_full(mask)) {
      heap.push({std::max(g, target), n, g, s});
      continue;
    }
    for (int v = 0; v < n; ++v) {
      if (!p.ready(v, mask)) continue;
      child = mask;
      child.set(v);
      int64_t after;
      int64_t foot = p.step(child, live, v, &after);
      int64_t g2 = std::max(foot, g);
      if (g2 >= ub) continue;
      int c = st.find(child.words().data());
      if (c >= 0 && st.g[c] <= g2) continue;
      int64_t f2 = std::max(std::max(g2, h(child)), target);
      if (f2 >= ub) continue;
      if (c >= 0) {
        st.g[c] = g2;
        st.parent[c] = s;
        st.via[c] = v;
        st.live[c] = after;
      } else {
        c = st.insert(child.words().data(), g2, after, s, v);
      }
      heap.push({f2, child.count(), g2, c});
    }
  }
  if (exhausted) lower = ub;  // nothing below ub: the heuristic order is optimal
  res.lower_bound = std::min(lower, ub);
  res.states = states;
  res.memory_bytes = static_cast<int64_t>(st.bytes() + heap.bytes());
  return res;
}

Footprint Evaluate(const Problem& p, const std::vector<int>& order) {
  Footprint fp;
  Bits mask(p.n);
  int64_t live = p.initial_live();
  fp.lives.push_back(live);
  for (int v : order) {
    if (v < 0 || v >= p.n) throw std::invalid_argument("op id out of range: " + std::to_string(v));
    if (mask.test(v)) throw std::invalid_argument("op " + std::to_string(v) + " scheduled twice");
    if (!p.pred_mask[v].subset_of(mask))
      throw std::invalid_argument("op " + std::to_string(v) +
                                  " scheduled before one of its predecessors");
    mask.set(v);
    int64_t after;
    int64_t foot = p.step(mask, live, v, &after);
    live = after;
    fp.steps.push_back(foot);
    fp.lives.push_back(live);
  }
  if (static_cast<int>(order.size()) != p.n)
    throw std::invalid_argument("order does not schedule every op exactly once");
  fp.peak = fp.steps.empty() ? fp.lives[0] : *std::max_element(fp.steps.begin(), fp.steps.end());
  return fp;
}

}  // namespace memsched
