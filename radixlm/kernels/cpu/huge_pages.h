// Anonymous memory on transparent huge pages, for buffers a decode step streams (repacked weights).
//
// A batch-1 product reads its weight once per step; from 2 MB pages it streams faster than from 4 KB
// ones (fewer TLB misses: benchmarks/log/architecture-measurements.md). The kernel gives huge pages
// here only on request (THP "madvise"), and only for 2 MB-aligned ranges wholly inside one mapping.
// So the mapping starts on a 2 MB boundary (over-mapped, then the unaligned head and the tail cut
// off) and is marked MADV_HUGEPAGE before its first touch. Its end is rounded to 4 KB only: the last
// part of a huge page is served by 4 KB pages, and no byte past the buffer is ever made resident.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace radixlm {

constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` (> 0) of zero-filled memory starting on a 2 MB boundary, or nullptr; free with
// free_huge_page_buffer(p, bytes).
inline void* alloc_huge_page_buffer(size_t bytes) {
  const size_t size = (bytes + 4095) / 4096 * 4096;
  const size_t mapped = size + kHugePageBytes;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + size, mapped_end = start + mapped;
  if (mapped_end > end) munmap(reinterpret_cast<void*>(end), mapped_end - end);
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // advice: ignored where THP is off
  return reinterpret_cast<void*>(aligned);
}

inline void free_huge_page_buffer(void* p, size_t bytes) { munmap(p, (bytes + 4095) / 4096 * 4096); }

}  // namespace radixlm
