#include "astar.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>

namespace memsched {
namespace {

// All states' bitsets live in one pool (W words each); an open-addressing table maps a bitset
// to its state index.
class StateTable {
 public:
  explicit StateTable(int words) : W_(words) { table_.assign(1 << 12, 0); }

  int size() const { return static_cast<int>(g.size()); }
  const uint64_t* key(int s) const { return pool_.data() + static_cast<size_t>(s) * W_; }

  // index of the state with this bitset, or -1. A slot holds the state index + 1 in its low
  // 32 bits and 32 bits of the key's hash above: a probe compares keys only when those match
  // (comparing keys in the pool was a fifth of the search time, mostly cache misses).
  int find(const uint64_t* k) const { return find(k, hash(k)); }
  int find(const uint64_t* k, uint64_t h) const {
    size_t mask = table_.size() - 1;
    uint64_t fp = h >> 32;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      uint64_t slot = table_[i];
      if (slot == 0) return -1;
      if ((slot >> 32) == fp) {
        int s = static_cast<int>(static_cast<uint32_t>(slot)) - 1;
        if (same(k, key(s))) return s;
      }
    }
  }

  void prefetch(uint64_t h) const { __builtin_prefetch(&table_[h & (table_.size() - 1)]); }

  uint64_t hash(const uint64_t* k) const {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < W_; ++i) {
      h ^= k[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    }
    return h ^ (h >> 33);
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
    return pool_.capacity() * sizeof(uint64_t) + table_.capacity() * sizeof(uint64_t) +
           (g.capacity() + live.capacity()) * sizeof(int64_t) +
           (parent.capacity() + via.capacity()) * sizeof(int);
  }

  std::vector<int64_t> g, live;
  std::vector<int> parent, via;

 private:
  bool same(const uint64_t* a, const uint64_t* b) const {
    for (int i = 0; i < W_; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }
  void place(int s) {
    size_t mask = table_.size() - 1;
    uint64_t h = hash(key(s));
    size_t i = h & mask;
    while (table_[i] != 0) i = (i + 1) & mask;
    table_[i] = ((h >> 32) << 32) | static_cast<uint32_t>(s + 1);
  }
  void grow() {
    table_.assign(table_.size() * 2, 0);
    for (int s = 0; s < size(); ++s) place(s);
  }

  int W_;
  std::vector<uint64_t> pool_;
  std::vector<uint64_t> table_;
};

struct Entry {
  int64_t f;
  int depth;
  int64_t g;
  int state;
};

// The open list: a bucket queue keyed by (f, depth), popped at the smallest f and, within it,
// the deepest ops-executed count first (a dive towards a complete order), first in first out
// within a bucket. f takes few distinct values (peaks) and depth is at most n, so push and pop
// are O(1) amortised: a binary heap of tens of millions of entries spent most of the search in
// cache misses (sift-down over ~25 levels per pop).
class OpenList {
 public:
  explicit OpenList(int n) : n_(n) {}
  bool empty() const { return size_ == 0; }
  void push(const Entry& e) {
    Level& L = level(e.f);
    std::vector<Item>& bucket = L.by_depth[e.depth];
    size_t cap = bucket.capacity();
    bucket.push_back({e.g, e.state});
    bytes_ += (bucket.capacity() - cap) * sizeof(Item);
    added(L, e.depth);
  }
  // the entry to expand next (precondition: !empty())
  Entry pop() {
    auto it = levels_.begin();
    Level& L = it->second;
    while (L.by_depth[L.top].empty()) --L.top;
    std::vector<Item>& bucket = L.by_depth[L.top];
    size_t& head = L.head[L.top];
    Entry e{it->first, L.top, bucket[head].g, bucket[head].state};
    if (++head == bucket.size()) {  // first in, first out; the storage is reused when drained
      bucket.clear();
      head = 0;
    }
    --size_;
    if (--L.count == 0) {
      for (const auto& b : L.by_depth) bytes_ -= b.capacity() * sizeof(Item);
      bytes_ -= (n_ + 1) * sizeof(std::vector<Item>);
      levels_.erase(it);
    }
    return e;
  }
  // put back an entry just popped (nothing pushed since) where it was: at the head of its
  // bucket, so a run stopped at a limit and resumed pops exactly what one run would
  void unpop(const Entry& e) {
    Level& L = level(e.f);
    std::vector<Item>& bucket = L.by_depth[e.depth];
    size_t& head = L.head[e.depth];
    if (head > 0) {
      bucket[--head] = {e.g, e.state};
    } else {
      size_t cap = bucket.capacity();
      bucket.insert(bucket.begin(), {e.g, e.state});
      bytes_ += (bucket.capacity() - cap) * sizeof(Item);
    }
    added(L, e.depth);
  }
  int64_t min_f() const { return levels_.begin()->first; }
  size_t bytes() const { return bytes_; }

 private:
  struct Item {
    int64_t g;
    int state;
  };
  struct Level {
    std::vector<std::vector<Item>> by_depth;
    std::vector<size_t> head;
    int top = -1;
    size_t count = 0;
  };
  // the level of f, created empty when there is none
  Level& level(int64_t f) {
    auto it = levels_.find(f);
    if (it == levels_.end()) {
      it = levels_.emplace(f, Level()).first;
      it->second.by_depth.resize(n_ + 1);
      it->second.head.resize(n_ + 1, 0);
      bytes_ += (n_ + 1) * sizeof(std::vector<Item>);
    }
    return it->second;
  }
  void added(Level& L, int depth) {
    L.top = std::max(L.top, depth);
    ++L.count;
    ++size_;
  }
  int n_;
  size_t size_ = 0, bytes_ = 0;
  std::map<int64_t, Level> levels_;
};

}  // namespace

// The search's state lives in the object so that Run can stop at a limit and later go on
// where it stopped (memsched's `auto` interleaves it with CP-SAT in growing turns).
struct AstarSearch::Impl {
  struct Kid {
    int op;
    int64_t g, live, f;
    uint64_t hash;
  };
  Impl(const Problem& p0, const std::vector<int>& ub_order, int64_t ub0, int64_t target0,
       bool backward0)
      : p(p0), n(p0.n), W((p0.n + 63) / 64), backward(backward0), st(W), heap(p0.n),
        full(p0.n), mask(p0.n), child(p0.n), ub(ub0), target(target0) {
    res.order = ub_order;
    res.peak = ub;
    if (ub <= target || n == 0) {
      res.lower_bound = std::max(ub, target);
      finished = true;
      return;
    }
    stat.resize(n);
    for (int v = 0; v < n; ++v) stat[v] = p.static_bound(v);
    by_static.resize(n);
    for (int v = 0; v < n; ++v) by_static[v] = v;
    std::stable_sort(by_static.begin(), by_static.end(),
                     [&](int a, int b) { return stat[a] > stat[b]; });
    for (int v = 0; v < n; ++v) full.set(v);
    int64_t live0 = p.initial_live();
    if (backward) {
      succ_rows.assign(static_cast<size_t>(n) * W, 0);
      for (int v = 0; v < n; ++v)
        for (int u : p.preds[v]) succ_rows[static_cast<size_t>(u) * W + (v >> 6)] |= uint64_t(1) << (v & 63);
      live0 = p.final_live();
    }
    st.insert(mask.words().data(), 0, live0, -1, -1);
    lower = std::max(h(mask), target);
    heap.push({lower, 0, 0, 0});
  }

  // Forward, a state is the set of ops run; backward (time reversed: from the end of the
  // schedule towards its start) the set of ops *not yet* run, i.e. un-run from the end. The
  // peak of an order is the same read either way, so both directions prove the same bound,
  // but their state spaces differ: a graph whose start is tight (a large input alive until
  // its last reader) is often far smaller to enumerate from its end.
  bool ready(int v, const Bits& m) const {
    return backward ? !m.test(v) && p.row_in(succ_rows, v, m) : p.ready(v, m);
  }
  // the step taking state m (without v) to m | {v}: footprint, and live bytes after it
  int64_t step(const Bits& m, const Bits& m_with_v, int64_t live, int v, int64_t* after) const {
    return backward ? p.unstep(m, live, v, after) : p.step(m_with_v, live, v, after);
  }

  int64_t h(const Bits& m) const {
    for (int v : by_static)
      if (!m.test(v)) return stat[v];
    return 0;
  }
  bool is_full(const Bits& m) const { return m.words() == full.words(); }
  void load(int s, Bits* m) const {
    const uint64_t* k = st.key(s);
    std::copy(k, k + W, m->words().begin());
  }

  // A better order or a proven bound found elsewhere (only ever tightens).
  void Tighten(int64_t target2, const std::vector<int>* order, int64_t ub2) {
    if (finished) return;
    target = std::max(target, target2);
    if (order != nullptr && ub2 < ub) {
      ub = ub2;
      res.order = *order;
      res.peak = ub2;
    }
    if (ub <= target) {
      res.lower_bound = ub;
      finished = true;
    }
  }

  SearchResult Run(const SearchLimits& limits);

  const Problem& p;
  const int n, W;
  const bool backward;
  std::vector<uint64_t> succ_rows;  // backward only: n x W successor bits
  StateTable st;
  OpenList heap;
  Bits full, mask, child;
  std::vector<int64_t> stat;
  std::vector<int> by_static;
  std::vector<Kid> kids;
  std::vector<uint64_t> kid_keys;
  int64_t ub, target, lower = 0, states = 0;
  bool finished = false;
  SearchResult res;
};

SearchResult AstarSearch::Impl::Run(const SearchLimits& limits) {
  if (finished) {
    res.states = states;
    res.reason = StopReason::kDone;
    return res;
  }
  using Clock = std::chrono::steady_clock;
  const bool timed = limits.time_limit_s >= 0;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(
                                          timed ? std::min(limits.time_limit_s, 1e9) : 0.0));
  bool exhausted = true;
  const int64_t states0 = states;
  res.reason = StopReason::kDone;
  // Limits are polled every 1024 expansions, and on large problems also every kPollWork op
  // visits (an expansion visits all n ops: on a 20k-op segment 1024 expansions took 8 s, past
  // the deadline): deterministic for states and memory (capacities grow identically on every
  // run), a clock read and a flag load for time and Ctrl-C. max_states counts this run only.
  constexpr int64_t kPollWork = int64_t(1) << 18;
  int64_t work = 0;
  auto stop_reason = [&]() -> StopReason {
    if (limits.stop_flag != nullptr && __atomic_load_n(limits.stop_flag, __ATOMIC_RELAXED) != 0)
      return StopReason::kInterrupted;
    if (limits.max_states >= 0 && states - states0 >= limits.max_states) return StopReason::kStates;
    if (limits.memory_limit >= 0 &&
        static_cast<int64_t>(st.bytes() + heap.bytes()) >= limits.memory_limit)
      return StopReason::kMemory;
    if (timed && Clock::now() >= end) return StopReason::kTime;
    return StopReason::kDone;
  };

  while (!heap.empty()) {
    Entry e = heap.pop();
    const Entry popped = e;
    int s = e.state;
    int64_t g = e.g;
    if (st.g[s] < g) continue;  // stale
    e.f = std::max(e.f, target);  // the target may have been raised between runs
    if (e.f >= ub) {
      lower = ub;
      break;
    }
    lower = e.f;
    load(s, &mask);
    if (is_full(mask)) {
      std::vector<int> order;
      for (int x = s; st.parent[x] >= 0; x = st.parent[x]) order.push_back(st.via[x]);
      if (!backward) std::reverse(order.begin(), order.end());  // backward: un-run last first
      res.order = std::move(order);
      res.peak = g;
      res.lower_bound = e.f;
      res.states = states;
      res.memory_bytes = static_cast<int64_t>(st.bytes() + heap.bytes());
      finished = true;
      return res;
    }
    ++states;
    work += n;
    // (never before the run's first expansion: a resumed run must make progress)
    if (((states & 1023) == 0 || work >= kPollWork) && states > states0 + 1) {
      work = 0;
      StopReason why = stop_reason();
      if (why != StopReason::kDone) {
        res.reason = why;
        heap.unpop(popped);  // not expanded: the next run starts with it
        --states;
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
        if (!ready(v, mask)) continue;
        child = mask;
        child.set(v);
        int64_t after;
        int64_t foot = step(mask, child, live, v, &after);
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
    // Partial expansion (PEA*, Felner et al. 2012): only children at the popped f level are
    // stored and queued; the state goes back in the queue at the smallest f of the others and
    // generates them when that level is reached. Without it, proving a level meant holding
    // every child of every state of that level: 10 GiB and 142 s on RandWire-WS-1's first
    // stage, 1.6 GiB and 31 s when no child above the level was kept.
    // Two passes: the children that survive the bounds first, prefetching their table slots,
    // then the lookups (a lookup is a cache miss into a table of millions of states; issued
    // together they overlap).
    int64_t deferred = ub;
    const int depth = mask.count();
    kids.clear();
    for (int v = 0; v < n; ++v) {
      if (!ready(v, mask)) continue;
      child = mask;
      child.set(v);
      int64_t after;
      int64_t foot = step(mask, child, live, v, &after);
      int64_t g2 = std::max(foot, g);
      if (g2 >= ub) continue;
      int64_t f2 = std::max(std::max(g2, h(child)), target);
      if (f2 >= ub) continue;
      if (f2 > e.f) {  // before the table lookup: most children of a hard level land here
        deferred = std::min(deferred, f2);
        continue;
      }
      uint64_t hv = st.hash(child.words().data());
      st.prefetch(hv);
      kids.push_back({v, g2, after, f2, hv});
      kid_keys.resize(kids.size() * W);
      std::copy(child.words().begin(), child.words().end(), kid_keys.end() - W);
    }
    for (size_t i = 0; i < kids.size(); ++i) {
      const Kid& k = kids[i];
      const uint64_t* key = kid_keys.data() + i * W;
      int c = st.find(key, k.hash);
      if (c >= 0 && st.g[c] <= k.g) continue;
      if (c >= 0) {
        st.g[c] = k.g;
        st.parent[c] = s;
        st.via[c] = k.op;
        st.live[c] = k.live;
      } else {
        c = st.insert(key, k.g, k.live, s, k.op);
      }
      heap.push({k.f, depth + 1, k.g, c});
    }
    if (deferred < ub) heap.push({deferred, depth, g, s});
  }
  if (exhausted) lower = ub;  // nothing below ub (or the queue reached it): ub is optimal
  if (exhausted) finished = true;
  res.lower_bound = std::min(std::max(lower, target), ub);
  res.states = states;
  res.memory_bytes = static_cast<int64_t>(st.bytes() + heap.bytes());
  return res;
}

AstarSearch::AstarSearch(const Problem& p, const std::vector<int>& ub_order, int64_t ub,
                         int64_t target, bool backward)
    : impl_(new Impl(p, ub_order, ub, target, backward)) {}
AstarSearch::~AstarSearch() = default;
SearchResult AstarSearch::Run(const SearchLimits& limits) { return impl_->Run(limits); }
void AstarSearch::Tighten(int64_t target, const std::vector<int>* order, int64_t ub) {
  impl_->Tighten(target, order, ub);
}
bool AstarSearch::finished() const { return impl_->finished; }

SearchResult Astar(const Problem& p, const std::vector<int>& ub_order, int64_t ub, int64_t target,
                   const SearchLimits& limits, bool backward) {
  AstarSearch search(p, ub_order, ub, target, backward);
  return search.Run(limits);
}

Footprint Evaluate(const Problem& p, const std::vector<int>& order) {
  Footprint fp;
  Bits mask(p.n);
  int64_t live = p.initial_live();
  fp.lives.push_back(live);
  for (int v : order) {
    if (v < 0 || v >= p.n) throw std::invalid_argument("op id out of range: " + std::to_string(v));
    if (mask.test(v)) throw std::invalid_argument("op " + std::to_string(v) + " scheduled twice");
    if (!p.row_in(p.pred_rows, v, mask))
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
