// Bytes ExecuTorch's runtime takes from the method allocator when it loads a method.
//
// Usage: method_allocator PROGRAM.pte METHOD [--temp-pool N] OPERATOR...
// Loads PROGRAM.pte with libexecutorch (the library the executorch wheel ships), the planned
// buffers malloc'ed at the sizes the program asks for, and a method allocator that counts
// what Method::init takes from it (values, tensor records, chains, instructions, kernel
// tables, argument lists). The operators are registered as no-op kernels: only loading is
// measured, never running, so the kernels' code does not matter (their tables do, and those
// are the runtime's own). The temp allocator holds N bytes (default 16 MiB): below what the
// operator lookups need, they go to the method allocator. Prints "method_allocator_bytes N",
// "temp_allocator_peak N" and the planned buffer sizes.
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace executorch::runtime;
using executorch::extension::FileDataLoader;

namespace {

// A bump allocator over one large buffer that records how far it went.
class CountingAllocator : public MemoryAllocator {
 public:
  CountingAllocator(uint32_t size, uint8_t* base) : MemoryAllocator(size, base), base_(base) {}
  void* allocate(size_t size, size_t alignment = kDefaultAlignment) override {
    void* p = MemoryAllocator::allocate(size, alignment);
    if (p != nullptr) {
      size_t end = static_cast<uint8_t*>(p) + size - base_;
      if (end > high_) high_ = end;
      ++count_;
    }
    return p;
  }
  size_t high() const { return high_; }
  size_t count() const { return count_; }

 private:
  uint8_t* base_;
  size_t high_ = 0;
  size_t count_ = 0;
};

void noop(KernelRuntimeContext&, Span<EValue*>) {}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PROGRAM.pte METHOD [--temp-pool N] OPERATOR...\n",
                 argv[0]);
    return 2;
  }
  int first_op = 3;
  uint32_t temp_size = 16u << 20;
  if (argc >= 5 && std::string(argv[3]) == "--temp-pool") {
    temp_size = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
    first_op = 5;
  }
  runtime_init();
  std::vector<Kernel> kernels;
  for (int i = first_op; i < argc; ++i) kernels.emplace_back(argv[i], noop);
  if (!kernels.empty() &&
      register_kernels(Span<const Kernel>(kernels.data(), kernels.size())) != Error::Ok) {
    std::fprintf(stderr, "registering the operators failed\n");
    return 1;
  }
  auto loader = FileDataLoader::from(argv[1]);
  if (!loader.ok()) {
    std::fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  auto program = Program::load(&loader.get());
  if (!program.ok()) {
    std::fprintf(stderr, "Program::load failed: 0x%x\n", (unsigned)program.error());
    return 1;
  }
  auto meta = program->method_meta(argv[2]);
  if (!meta.ok()) {
    std::fprintf(stderr, "no method %s\n", argv[2]);
    return 1;
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<Span<uint8_t>> spans;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    buffers.emplace_back(static_cast<size_t>(meta->memory_planned_buffer_size(i).get()));
    spans.emplace_back(buffers.back().data(), buffers.back().size());
  }
  HierarchicalAllocator planned({spans.data(), spans.size()});
  const uint32_t kPool = 256u << 20;
  std::vector<uint8_t> pool(kPool), temp(temp_size + 16);
  CountingAllocator method_alloc(kPool, pool.data());
  CountingAllocator temp_alloc(temp_size, temp_size ? temp.data() : nullptr);
  MemoryManager memory(&method_alloc, &planned, &temp_alloc);
  auto method = program->load_method(argv[2], &memory);
  if (!method.ok()) {
    std::fprintf(stderr, "load_method failed: 0x%x\n", (unsigned)method.error());
    return 1;
  }
  std::printf("method_allocator_bytes %zu\n", method_alloc.high());
  std::printf("method_allocator_allocations %zu\n", method_alloc.count());
  std::printf("temp_allocator_peak %zu\n", temp_alloc.high());
  for (size_t i = 0; i < buffers.size(); ++i)
    std::printf("planned_buffer %zu %zu\n", i, buffers[i].size());
  return 0;
}
