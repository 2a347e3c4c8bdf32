// std::vector with cache-line-aligned storage. Kernel buffers (activations, converted weight
// panels, the KV pool) use it so that 32-byte vector loads never straddle two cache lines: malloc
// hands large blocks back 16 bytes past a page boundary, and then every other AVX2 load of a row
// is a split load (measured: the f32 matmul tile 5-8% slower on such buffers).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ember {

inline constexpr std::size_t kCacheLineBytes = 64;

template <typename T>
struct CacheAlignedAllocator {
  using value_type = T;

  CacheAlignedAllocator() = default;
  template <typename U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>& /*other*/) noexcept {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t /*n*/) noexcept {
    ::operator delete (p, std::align_val_t{kCacheLineBytes});
  }

  template <typename U>
  bool operator==(const CacheAlignedAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheAlignedAllocator<T>>;

}  // namespace ember
