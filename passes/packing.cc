// Exact arena packing: canonical depth-first search with inference (see packing.h).
#include "packing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>

namespace memsched {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Failed states: (key, capacity at which it failed). A direct-mapped table with 4-way buckets,
// replacing the oldest way: bounded memory, deterministic.
class FailTable {
 public:
  explicit FailTable(int log2_buckets) : mask_((size_t{1} << log2_buckets) - 1) {
    slots_.assign((mask_ + 1) * kWays, Slot{});
    next_.assign(mask_ + 1, 0);
  }
  bool Failed(uint64_t a, uint64_t b, int64_t capacity) const {
    const Slot* s = &slots_[(a & mask_) * kWays];
    for (int w = 0; w < kWays; ++w)
      if (s[w].a == a && s[w].b == b && s[w].used && s[w].capacity >= capacity) return true;
    return false;
  }
  void Insert(uint64_t a, uint64_t b, int64_t capacity) {
    size_t bucket = a & mask_;
    Slot* s = &slots_[bucket * kWays];
    for (int w = 0; w < kWays; ++w)
      if (s[w].used && s[w].a == a && s[w].b == b) {
        s[w].capacity = std::max(s[w].capacity, capacity);
        return;
      }
    Slot& t = s[next_[bucket]];
    next_[bucket] = static_cast<uint8_t>((next_[bucket] + 1) % kWays);
    t = Slot{a, b, capacity, true};
  }

 private:
  static constexpr int kWays = 4;
  struct Slot {
    uint64_t a = 0, b = 0;
    int64_t capacity = 0;
    bool used = false;
  };
  size_t mask_;
  std::vector<Slot> slots_;
  std::vector<uint8_t> next_;
};

class Searcher {
 public:
  // `order`: the branching priority among buffers at equal offsets (see Pack).
  // `table_log2`: log2 of the failed-state table's buckets (4 ways each).
  Searcher(const PackProblem& p, const PackLimits& limits, int order, bool tight_first,
           Clock::time_point start, int table_log2)
      : n_(static_cast<int>(p.size.size())), S_(p.num_sections), limits_(limits),
        table_(table_log2) {
    // Numbered by priority: large first, then long-lived; equal buffers get consecutive numbers
    // (the tie rule among equal offsets then follows the priority and maps equal buffers onto
    // one another).
    auto dur = [&](int a) -> int64_t {
      return p.times.empty() ? p.hi[a] - p.lo[a] : p.times[p.hi[a]] - p.times[p.lo[a]];
    };
    // the fullest section each buffer meets (static liveness): with `tight_first`, buffers in
    // the fullest sections first (they leave the least room for waste)
    std::vector<int64_t> load(S_ + 1, 0), tight(n_, 0);
    for (int i = 0; i < n_; ++i) load[p.lo[i]] += p.size[i], load[p.hi[i]] -= p.size[i];
    for (int s = 1; s <= S_; ++s) load[s] += load[s - 1];
    for (int i = 0; i < n_; ++i)
      for (int s = p.lo[i]; s < p.hi[i]; ++s) tight[i] = std::max(tight[i], load[s]);
    perm_.resize(n_);
    std::iota(perm_.begin(), perm_.end(), 0);
    std::sort(perm_.begin(), perm_.end(), [&](int a, int b) {
      int64_t da = dur(a), db = dur(b);
      if (tight_first && tight[a] != tight[b]) return tight[a] > tight[b];
      if (order == 0 && p.size[a] * da != p.size[b] * db) return p.size[a] * da > p.size[b] * db;
      if (order == 1 && da != db) return da > db;
      if (order == 3 && p.lo[a] != p.lo[b]) return p.lo[a] < p.lo[b];
      if (order == 4) {
        int64_t sa = p.size[a] * (p.hi[a] - p.lo[a]), sb = p.size[b] * (p.hi[b] - p.lo[b]);
        if (sa != sb) return sa > sb;
      }
      if (order >= 5) {  // area, perturbed by up to 30 % or 100 % (deterministic per order)
        // mild (fullest-sections-first runs) and strong (the others) perturbations: on
        // MiniMalloc's tight instances each kind found packings the other did not (H only
        // with 100 %, I only with 30 %); chosen on those 11 instances, so tuned to them
        const double amp = (order - 5) % 2 == 0 ? 0.3 : 1.0;
        auto w = [&](int x, int64_t d) {
          return static_cast<double>(p.size[x]) * static_cast<double>(d) *
                 (1.0 + amp * static_cast<double>(Mix(x * 1000003ULL + order) % 1000) / 1000.0);
        };
        double wa = w(a, da), wb = w(b, db);
        if (wa != wb) return wa > wb;
      }
      if (p.size[a] != p.size[b]) return p.size[a] > p.size[b];
      if (da != db) return da > db;
      if (p.lo[a] != p.lo[b]) return p.lo[a] < p.lo[b];
      return a < b;
    });
    lo_.resize(n_), hi_.resize(n_), size_.resize(n_), cls_.resize(n_);
    for (int i = 0; i < n_; ++i) {
      lo_[i] = p.lo[perm_[i]], hi_[i] = p.hi[perm_[i]], size_[i] = p.size[perm_[i]];
      cls_[i] = (i > 0 && lo_[i] == lo_[i - 1] && hi_[i] == hi_[i - 1] &&
                 size_[i] == size_[i - 1]) ? cls_[i - 1] : i;
    }
    // neighbours in time
    nbr_.assign(n_, {});
    by_lo_.resize(n_);
    std::iota(by_lo_.begin(), by_lo_.end(), 0);
    std::sort(by_lo_.begin(), by_lo_.end(), [&](int a, int b) {
      return lo_[a] != lo_[b] ? lo_[a] < lo_[b] : a < b;
    });
    for (int x = 0; x < n_; ++x)
      for (int y = x + 1; y < n_ && lo_[by_lo_[y]] < hi_[by_lo_[x]]; ++y) {
        nbr_[by_lo_[x]].push_back(by_lo_[y]);
        nbr_[by_lo_[y]].push_back(by_lo_[x]);
      }
    for (int i = 0; i < n_; ++i) zkey_[0].push_back(Mix(i * 2 + 1)), zkey_[1].push_back(Mix(~(uint64_t)i * 7));
    acc_.resize(S_);
    eff0_.resize(n_);
    start_ = start;
  }

  // One decision search at `capacity`: true with offsets_ set, false when refuted or stopped
  // (stopped_ says which).
  bool Solve(int64_t capacity, int64_t node_budget) {
    C_ = capacity;
    packed_ = C_ < (int64_t{1} << 42) && n_ < (1 << 21);  // e < C and b < n fit in 63 bits
    budget_end_ = node_budget < 0 ? -1 : nodes_ + node_budget;
    stopped_ = false;
    floor_.assign(S_, 0);
    rem_.assign(S_, 0);
    minoff_.assign(n_, 0);
    placed_.assign(n_, 0);
    off_.assign(n_, 0);
    trail_.clear();
    pool_.clear();
    cur_ = 0;
    last_ = -1;
    for (int i = 0; i < n_; ++i) {
      if (size_[i] > C_) return false;
      for (int s = lo_[i]; s < hi_[i]; ++s) rem_[s] += size_[i];
    }
    pool_ = by_lo_;
    return Search(0, n_);
  }

  std::vector<int64_t> Offsets() const {  // in the caller's numbering
    std::vector<int64_t> out(n_);
    for (int i = 0; i < n_; ++i) out[perm_[i]] = off_[i];
    return out;
  }
  int64_t nodes() const { return nodes_; }
  bool stopped() const { return stopped_; }
  PackStop stop_reason() const { return reason_; }
  bool time_up() {
    if (limits_.time_limit_s >= 0 &&
        std::chrono::duration<double>(Clock::now() - start_).count() > limits_.time_limit_s) {
      reason_ = PackStop::kTime;
      return true;
    }
    if (limits_.stop_flag != nullptr && *limits_.stop_flag != 0) {
      reason_ = PackStop::kInterrupted;
      return true;
    }
    return false;
  }

 private:
  struct Undo {
    int kind;  // 0: floor of section idx, 1: minoff of buffer idx
    int idx;
    int64_t old;
  };

  void Place(int b, int64_t x) {
    off_[b] = x;
    placed_[b] = 1;
    int64_t top = x + size_[b];
    for (int s = lo_[b]; s < hi_[b]; ++s) {
      trail_.push_back({0, s, floor_[s]});
      floor_[s] = top;
      rem_[s] -= size_[b];
    }
    for (int c : nbr_[b])
      if (!placed_[c] && minoff_[c] < top) {
        trail_.push_back({1, c, minoff_[c]});
        minoff_[c] = top;
      }
  }

  void Unplace(int b, size_t mark) {
    while (trail_.size() > mark) {
      const Undo& u = trail_.back();
      if (u.kind == 0) floor_[u.idx] = u.old; else minoff_[u.idx] = u.old;
      trail_.pop_back();
    }
    for (int s = lo_[b]; s < hi_[b]; ++s) rem_[s] += size_[b];
    placed_[b] = 0;
  }

  bool Stop() {
    if (stopped_) return true;
    ++nodes_;
    if (budget_end_ >= 0 && nodes_ >= budget_end_) {
      reason_ = PackStop::kNodes;
      stopped_ = true;
    } else if ((nodes_ & 255) == 0 && time_up()) {
      stopped_ = true;
    }
    return stopped_;
  }

  // Places the buffers pool_[sb, se) (sorted by lo, unplaced, all sections of their range theirs).
  // On success they stay placed; on failure the state is as on entry.
  bool Search(size_t sb, size_t se) {
    if (sb == se) return true;
    if (Stop()) return false;
    // --- decomposition into groups disjoint in time
    {
      int reach = hi_[pool_[sb]];
      size_t split = 0;
      for (size_t k = sb + 1; k < se; ++k) {
        int b = pool_[k];
        if (lo_[b] >= reach) { split = k; break; }
        reach = std::max(reach, hi_[b]);
      }
      if (split != 0) {
        size_t placed_mark = placed_stack_.size();
        int64_t cur0 = cur_;
        int last0 = last_;
        // the left group, then the rest (which splits again)
        size_t first_end = split;
        bool ok = Search(sb, first_end);
        if (ok) {
          cur_ = cur0, last_ = last0;
          ok = Search(first_end, se);
        }
        cur_ = cur0, last_ = last0;
        if (!ok) UndoPlacements(placed_mark);
        return ok;
      }
    }
    const size_t m = se - sb;
    if (m == 1) {  // hatless: nothing else can ever sit on it
      int b = pool_[sb];
      if (minoff_[b] + size_[b] > C_) return false;
      placed_stack_.push_back({b, trail_.size()});
      Place(b, minoff_[b]);
      return true;
    }
    // --- section bound: every section's unplaced bytes stacked from their lowest level
    int L = lo_[pool_[sb]], R = 0;
    for (size_t k = sb; k < se; ++k) R = std::max(R, hi_[pool_[k]]);
    // the lowest offset each buffer can still reach: its own for a candidate; a stuck one (below
    // the current offset, or at it but before the last placed in the tie order) must rest on a
    // time-overlapping buffer placed later
    eff_.clear();
    for (size_t k = sb; k < se; ++k) {
      int b = pool_[k];
      bool cand = minoff_[b] > cur_ || (minoff_[b] == cur_ && b > last_);
      eff0_[b] = cand ? minoff_[b] : -1;
    }
    for (size_t k = sb; k < se; ++k) {
      int b = pool_[k];
      int64_t e = eff0_[b];
      if (e < 0) {
        e = int64_t{1} << 62;
        for (int c : nbr_[b])
          if (!placed_[c]) e = std::min(e, std::max(eff0_[c], cur_) + size_[c]);
      }
      if (e + size_[b] > C_) return false;
      eff_.push_back({e, b});
    }
    // every section's stack: buffers in it sorted by the lowest offset they can reach (release
    // dates on one machine): top >= e_k + the bytes of all with e >= e_k, for every k
    // sorted by (e, b); packed into one integer when both fit (sorting pairs was a quarter of
    // the search time on MiniMalloc's instances, one integer compare per step halves it)
    if (packed_) {
      keys_.clear();
      for (auto& [e, b] : eff_) keys_.push_back(static_cast<uint64_t>(e) << 21 | static_cast<uint64_t>(b));
      std::sort(keys_.begin(), keys_.end());
      for (size_t k = 0; k < keys_.size(); ++k)
        eff_[k] = {static_cast<int64_t>(keys_[k] >> 21), static_cast<int>(keys_[k] & ((1u << 21) - 1))};
    } else {
      std::sort(eff_.begin(), eff_.end());
    }
    int64_t maxrem = 0;
    for (int s = L; s < R; ++s) acc_[s] = 0, maxrem = std::max(maxrem, rem_[s]);
    for (size_t k = eff_.size(); k-- > 0;) {
      auto [e, b] = eff_[k];
      // add, then one test of the range's maximum: a loop without an exit vectorises (this
      // was a third of the search time)
      const int64_t sz = size_[b];
      int64_t top = 0;
      int64_t* acc = acc_.data();
      for (int s = lo_[b]; s < hi_[b]; ++s) {
        acc[s] += sz;
        top = std::max(top, acc[s]);
      }
      if (e + top > C_) return false;
    }
    uint64_t ha = Mix(static_cast<uint64_t>(cur_) ^ 0x51ed2701ULL), hb = Mix(cur_ + 12345);
    for (int s = L; s < R; ++s) {
      if (rem_[s] == 0) continue;
      uint64_t v = Mix((static_cast<uint64_t>(s) << 40) ^ static_cast<uint64_t>(floor_[s]));
      ha ^= v;
      hb += Mix(v ^ 0x7777);
    }
    for (size_t k = sb; k < se; ++k) {
      int b = pool_[k];
      ha ^= zkey_[0][b];
      hb += zkey_[1][b];
      if (minoff_[b] == cur_ && b < last_) ha ^= Mix(zkey_[0][b]), hb += Mix(zkey_[1][b] + 3);
    }
    if (table_.Failed(ha, hb, C_)) return false;
    // --- candidates: buffers that can rest at their lowest offset now
    size_t cb = pool_.size();
    for (auto& [e, b] : eff_) {
      bool cand = minoff_[b] > cur_ || (minoff_[b] == cur_ && b > last_);
      // all later offsets are >= this one: it must leave room for the fullest section
      if (cand && minoff_[b] + maxrem <= C_) pool_.push_back(b);
    }
    size_t ce = pool_.size();
    std::sort(pool_.begin() + cb, pool_.begin() + ce, [&](int a, int b) {
      return minoff_[a] != minoff_[b] ? minoff_[a] < minoff_[b] : a < b;
    });
    // dominance: placing b at x while another unplaced buffer c would end at or below x at its
    // lowest offset (minoff_c + size_c <= x) leaves a gap under b that c fits in. Every packing
    // below such a node has c at >= x; moving c down into the gap keeps it valid (the placed
    // buffers of c's sections end at or below minoff_c, all later ones start at or above x;
    // buffers of other groups of a decomposition are disjoint from c in time) with a smaller
    // sum of offsets. The least-offset-sum packing within the capacity is therefore never cut
    // (its path is what makes the search complete), and only buffers with
    // x < min over the others of (minoff_c + size_c) branch.
    int64_t top1 = int64_t{1} << 62, top2 = top1;
    int arg1 = -1;
    for (size_t k = sb; k < se; ++k) {
      int c = pool_[k];
      int64_t t = minoff_[c] + size_[c];
      if (t < top1) top2 = top1, top1 = t, arg1 = c;
      else if (t < top2) top2 = t;
    }
    int64_t cur0 = cur_;
    int last0 = last_;
    int prev_cls = -1;
    int64_t prev_off = -1;
    bool ok = false;
    for (size_t k = cb; k < ce && !ok; ++k) {
      int b = pool_[k];
      if (minoff_[b] >= (b == arg1 ? top2 : top1)) {
        if (minoff_[b] >= top2) break;  // sorted by offset: all later ones are dominated too
        continue;
      }
      if (cls_[b] == prev_cls && minoff_[b] == prev_off) continue;  // an equal buffer failed
      prev_cls = cls_[b], prev_off = minoff_[b];
      // equal buffers: only the first unplaced one of its class may go (tie rule symmetry)
      if (b > 0 && cls_[b - 1] == cls_[b] && !placed_[b - 1]) continue;
      int64_t x = minoff_[b];
      size_t mark = trail_.size();
      size_t pmark = placed_stack_.size();
      placed_stack_.push_back({b, mark});
      Place(b, x);
      cur_ = x, last_ = b;
      // child scope: this scope less b
      size_t child = pool_.size();
      for (size_t q = sb; q < se; ++q)
        if (pool_[q] != b) pool_.push_back(pool_[q]);
      ok = Search(child, pool_.size());
      pool_.resize(child);
      cur_ = cur0, last_ = last0;
      if (!ok) {
        UndoPlacements(pmark);
        if (stopped_) break;
      }
    }
    pool_.resize(cb);
    if (!ok && !stopped_) table_.Insert(ha, hb, C_);
    return ok;
  }

  void UndoPlacements(size_t mark) {
    while (placed_stack_.size() > mark) {
      auto [b, t] = placed_stack_.back();
      placed_stack_.pop_back();
      Unplace(b, t);
    }
  }

  int n_, S_;
  PackLimits limits_;
  FailTable table_;
  std::vector<int> perm_, lo_, hi_, cls_, by_lo_;
  std::vector<int64_t> size_;
  std::vector<std::vector<int>> nbr_;
  std::vector<uint64_t> zkey_[2];
  // state
  int64_t C_ = 0, cur_ = 0;
  int last_ = -1;
  std::vector<int64_t> floor_, rem_, minoff_, off_, acc_, eff0_;
  std::vector<char> placed_;
  std::vector<Undo> trail_;
  std::vector<std::pair<int, size_t>> placed_stack_;
  std::vector<int> pool_;
  std::vector<std::pair<int64_t, int>> eff_;
  std::vector<uint64_t> keys_;
  bool packed_ = false;
  int64_t nodes_ = 0, budget_end_ = -1;
  bool stopped_ = false;
  PackStop reason_ = PackStop::kDone;
  Clock::time_point start_;
};

int64_t ArenaOf(const PackProblem& p, const std::vector<int64_t>& off) {
  int64_t a = 0;
  for (size_t i = 0; i < off.size(); ++i) a = std::max(a, off[i] + p.size[i]);
  return a;
}

}  // namespace

namespace {

// Restarts (heavy-tailed search: which branching priority finds a packing quickly differs from
// instance to instance, and a bad early choice can cost a whole subtree). Runs alternate
// between (a) the nine plain priorities in turn - area, size, duration, start, each with or
// without "buffers of the fullest sections first" - whose node budget doubles with every cycle
// through them, and (b) fresh priorities (area perturbed by up to 30 %, seeded by the run
// number; every other one fullest-sections-first) under budgets after the Luby sequence
// (unit x 1, 1, 2, 1, 1, 2, 4, ...). Every run is a complete search given its budget, so a
// run that ends within it is a proof; budgets grow without bound, so one eventually does.
class Portfolio {
 public:
  Portfolio(const PackProblem& p, const PackLimits& limits, int64_t unit)
      : p_(p), limits_(limits), unit_(unit), start_(Clock::now()) {}
  // One run: 1 packed within `capacity` (offsets()); 0 proven impossible; -1 budget spent;
  // -2 stopped (time, node limit, interrupt).
  int Run(int64_t capacity) {
    // (priority, fullest sections first): area 0, size 2, duration 1, start 3, section-area 4
    static const int kPlain[][2] = {{0, 1}, {0, 0}, {2, 1}, {1, 1}, {3, 1},
                                    {2, 0}, {1, 0}, {3, 0}, {4, 0}};
    constexpr int kNumPlain = sizeof(kPlain) / sizeof(kPlain[0]);
    int order;
    bool tight;
    int64_t budget;
    int64_t k = run_ / 2;
    if (run_ % 2 == 0) {  // the plain priorities in turn, each cycle with twice the budget
      order = kPlain[k % kNumPlain][0];
      tight = kPlain[k % kNumPlain][1] != 0;
      budget = unit_ << std::min<int64_t>(k / kNumPlain, 40);
    } else {  // perturbed priorities, budgets after Luby
      order = 5 + static_cast<int>(k % 1000000);
      tight = k % 2 == 0;
      budget = unit_ * Luby(k + 1);
    }
    ++run_;
    if (limits_.max_nodes >= 0) {
      if (nodes_ >= limits_.max_nodes) return -2;
      budget = std::min(budget, limits_.max_nodes - nodes_);
    }
    int log2 = 10;  // a table about the size of the node budget, at most 2^18 x 4 slots
    while (log2 < 18 && (int64_t{4} << log2) < budget) ++log2;
    Searcher s(p_, limits_, order, tight, start_, log2);
    bool found = s.Solve(capacity, budget);
    nodes_ += s.nodes();
    if (found) {
      offsets_ = s.Offsets();
      return 1;
    }
    if (!s.stopped()) return 0;
    if (s.stop_reason() != PackStop::kNodes || s.time_up()) {
      reason_ = s.stop_reason();
      return -2;
    }
    if (limits_.max_nodes >= 0 && nodes_ >= limits_.max_nodes) return -2;
    return -1;
  }
  int64_t nodes() const { return nodes_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  PackStop reason() const { return reason_; }

 private:
  static int64_t Luby(int64_t i) {  // 1-based
    for (int64_t k = 1;; ++k) {
      if (i == (int64_t{1} << k) - 1) return int64_t{1} << (k - 1);
      if (i < (int64_t{1} << k) - 1) return Luby(i - (int64_t{1} << (k - 1)) + 1);
    }
  }
  const PackProblem& p_;
  PackLimits limits_;
  int64_t unit_;
  Clock::time_point start_;
  int64_t run_ = 0;
  int64_t nodes_ = 0;
  std::vector<int64_t> offsets_;
  PackStop reason_ = PackStop::kNodes;
};

}  // namespace

PackResult Pack(const PackProblem& p, int64_t capacity, int64_t lower_bound,
                const std::vector<int64_t>& initial, const PackLimits& limits) {
  PackResult r;
  const int n = static_cast<int>(p.size.size());
  r.lower_bound = lower_bound;
  for (int i = 0; i < n; ++i) r.lower_bound = std::max(r.lower_bound, p.size[i]);
  if (static_cast<int>(initial.size()) == n && n > 0) {
    r.offsets = initial;
    r.arena = ArenaOf(p, initial);
  }
  if (n == 0) {
    r.arena = 0;
    r.lower_bound = 0;
    return r;
  }
  // (measured on MiniMalloc's challenging set: units of 2000-5000 nodes all fit the 11
  // instances in <= 5.4 s; 1000 missed one within 15 s)
  int64_t unit = std::max<int64_t>(2500, 5 * n);
  Portfolio port(p, limits, unit);
  auto take = [&](const Portfolio& from) {
    r.offsets = from.offsets();
    r.arena = ArenaOf(p, r.offsets);
  };
  if (capacity >= 0) {  // decision
    if (r.arena >= 0 && r.arena <= capacity) return r;
    if (capacity < r.lower_bound) {
      r.lower_bound = std::max(r.lower_bound, capacity + 1);
      return r;
    }
    for (;;) {
      int k = port.Run(capacity);
      if (k == 1) { take(port); break; }
      if (k == 0) { r.lower_bound = capacity + 1; break; }
      if (k == -2) { r.reason = port.reason(); break; }
    }
    r.nodes = port.nodes();
    return r;
  }
  // minimise: runs at the lower bound (a packing there is optimal; a proof that there is none
  // raises the bound by one unit) take turns with probes below the best arena, each stream
  // with its own restart schedule (so they get about the same nodes). The probes alternate
  // between two targets: a bisection target (halfway between the bound and the best arena
  // after every packing found; rising halfway towards the arena when a run spends its budget)
  // and a near target `step` below the arena (the step doubles after every packing it finds,
  // up to half the gap, and halves when a run spends its budget): large strides where
  // improvement is easy, small ones close to a hard region. A proof that a target cannot be
  // packed raises the bound past it.
  Portfolio mid_runs(p, limits, unit), near_runs(p, limits, unit);
  auto half_gap = [&]() { return std::max<int64_t>(1, (r.arena - r.lower_bound) / 2); };
  auto midpoint = [&]() { return r.lower_bound + (r.arena - r.lower_bound) / 2; };
  int64_t mid = r.arena < 0 ? (int64_t{1} << 62) : midpoint();
  int64_t step = r.arena < 0 ? 1 : std::max<int64_t>(1, (r.arena - r.lower_bound) / 16);
  for (int64_t turn = 0; r.arena < 0 || r.arena > r.lower_bound; ++turn) {
    int k = port.Run(r.lower_bound);
    if (k == 1) { take(port); break; }
    if (k == 0) { ++r.lower_bound; continue; }
    if (k == -2) { r.reason = port.reason(); break; }
    bool near = r.arena >= 0 && turn % 2 == 1;
    int64_t target;
    if (r.arena < 0) {
      target = mid;
    } else if (near) {
      step = std::min(step, half_gap());
      target = r.arena - step;
    } else {
      if (mid >= r.arena || mid < r.lower_bound) mid = midpoint();
      target = mid;
    }
    if (r.arena >= 0 && target <= r.lower_bound) continue;  // the bound's own stream does it
    Portfolio& runs = near ? near_runs : mid_runs;
    k = runs.Run(target);
    if (k == 1) {
      take(runs);
      if (near) step = std::min(step * 2, half_gap());
      mid = midpoint();
    } else if (k == 0) {
      r.lower_bound = std::max(r.lower_bound, target + 1);
      if (r.arena >= 0) mid = midpoint();
    } else if (k == -1) {
      if (near) step = std::max<int64_t>(1, step / 2);
      else if (r.arena >= 0) mid += std::max<int64_t>(1, (r.arena - mid) / 2);
    } else {
      r.reason = runs.reason();
      break;
    }
  }
  r.lower_bound = std::min(r.lower_bound, r.arena < 0 ? r.lower_bound : r.arena);
  r.nodes = port.nodes() + mid_runs.nodes() + near_runs.nodes();
  if (r.arena >= 0 && r.arena <= r.lower_bound) r.reason = PackStop::kDone;
  return r;
}

}  // namespace memsched

// ------------------------------------------------------------------------------ tvm-ffi entry
//
//   memsched.native.pack(lo, hi, size, times, capacity, lower_bound, initial, time_limit_s,
//                        max_nodes, stop_flag_address)
//       -> [arena, lower_bound, nodes, stop_reason, offsets...]
//   (capacity < 0: minimise; times may be empty; initial empty or one offset per buffer;
//    negative limits: none; arena -1: nothing found within the capacity; stop_reason: PackStop)
#ifndef MEMSCHED_PACK_NO_FFI  // (defined for a standalone build of the packer)
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

namespace memsched {
namespace {

namespace ffi = tvm::ffi;

template <typename T>
std::vector<T> ToVec(const ffi::Array<int64_t>& a) {
  std::vector<T> out;
  out.reserve(a.size());
  for (int64_t x : a) out.push_back(static_cast<T>(x));
  return out;
}

ffi::Array<int64_t> PackFn(ffi::Array<int64_t> lo, ffi::Array<int64_t> hi, ffi::Array<int64_t> size,
                           ffi::Array<int64_t> times, int64_t capacity, int64_t lower_bound,
                           ffi::Array<int64_t> initial, double time_limit_s, int64_t max_nodes,
                           int64_t stop_flag_address) {
  PackProblem p;
  p.lo = ToVec<int>(lo);
  p.hi = ToVec<int>(hi);
  p.size = ToVec<int64_t>(size);
  p.times = ToVec<int64_t>(times);
  const size_t n = p.size.size();
  if (p.lo.size() != n || p.hi.size() != n)
    TVM_FFI_THROW(ValueError) << "lo, hi and size must have one entry per buffer";
  int sections = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p.lo[i] < 0 || p.hi[i] <= p.lo[i] || p.size[i] <= 0)
      TVM_FFI_THROW(ValueError) << "buffer " << i << ": need 0 <= lo < hi and size > 0";
    sections = std::max(sections, p.hi[i]);
  }
  p.num_sections = sections;
  if (!p.times.empty() && static_cast<int>(p.times.size()) < sections + 1)
    TVM_FFI_THROW(ValueError) << "times needs one entry per section boundary";
  std::vector<int64_t> init = ToVec<int64_t>(initial);
  if (!init.empty() && init.size() != n)
    TVM_FFI_THROW(ValueError) << "initial needs one offset per buffer";
  PackLimits limits;
  limits.time_limit_s = time_limit_s;
  limits.max_nodes = max_nodes;
  limits.stop_flag = reinterpret_cast<const int32_t*>(static_cast<intptr_t>(stop_flag_address));
  PackResult r = Pack(p, capacity, lower_bound, init, limits);
  std::vector<int64_t> out = {r.arena, r.lower_bound, r.nodes, static_cast<int64_t>(r.reason)};
  out.insert(out.end(), r.offsets.begin(), r.offsets.end());
  return ffi::Array<int64_t>(out.begin(), out.end());
}

}  // namespace
}  // namespace memsched

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def(
      "memsched.native.pack", memsched::PackFn,
      "Exact arena packing (canonical DFS): [arena, lower_bound, nodes, stop_reason, offsets...]");
}
#endif  // MEMSCHED_PACK_NO_FFI
