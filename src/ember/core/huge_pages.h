// Anonymous memory backed by transparent huge pages (2 MiB) where the kernel allows them.
//
// Decode streams every weight once per token, and at that rate the 4 KiB page size costs: the
// hardware prefetchers stop at every page boundary and each page needs its own TLB entry. On this
// project's reference VM (AMD EPYC, 2 cores) two threads summing a 1 GiB buffer read 22-27 GB/s
// from 4 KiB pages and 25-37 GB/s from 2 MiB pages (3 alternating runs). Weights ember copies at
// load (interleaved q8_0/q4_0, converted dtypes, or every matrix with --no-mmap) and the KV pool
// live here. Zero-copy weights get 2 MiB pages only where the file's cache holds 2 MiB folios
// (mapped_file.cpp); MADV_COLLAPSE refuses file-backed memory without
// CONFIG_READ_ONLY_THP_FOR_FS, so a file cached in small folios stays on 4 KiB.
//
// With THP set to "never" (or on kernels without it) this is plain anonymous memory: correct,
// only without the speed-up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ember {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Under AddressSanitizer the memory comes from the (instrumented) heap instead, a block per
// buffer and per arena allocation of exactly the bytes asked for, so that a read or write past a
// weight matrix or the KV pool is still reported: anonymous mmap has no redzones.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kHugePagesFromHeap = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kHugePagesFromHeap = true;
#else
inline constexpr bool kHugePagesFromHeap = false;
#endif
#else
inline constexpr bool kHugePagesFromHeap = false;
#endif

// One zero-filled region of at least `bytes`, 2 MiB aligned, advised MADV_HUGEPAGE. Move-only.
// prefault: touch every page now (as the kernel zero-fills it) instead of on first use, so that
// first use does not pay the page faults (the KV pool: its first decode steps would otherwise).
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  explicit HugePageBuffer(std::size_t bytes, bool prefault = false);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  // Rounded up to whole huge pages (kHugePagesFromHeap: exactly the bytes asked for).
  std::size_t size() const { return size_; }

 private:
  void release();
  uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Bump allocator over HugePageBuffers: small requests share 32 MiB regions, larger ones get their
// own (kHugePagesFromHeap: every request its own). Memory is released when the arena is destroyed.
class HugePageArena {
 public:
  // `bytes` of zero-filled memory, 64-byte aligned, valid for the arena's lifetime.
  uint8_t* allocate(std::size_t bytes);
  std::size_t reserved_bytes() const;
  // Whether p points into memory this arena handed out.
  bool owns(const void* p) const;
  // Bytes of the arena the kernel backs with huge pages now (huge_page_backed_bytes per region).
  std::size_t huge_backed_bytes() const;

 private:
  static constexpr std::size_t kRegionBytes = std::size_t{32} << 20;
  std::vector<HugePageBuffer> regions_;
  std::size_t used_in_last_ = 0;  // bytes taken from the shared region at regions_[shared_]
  std::size_t shared_ = SIZE_MAX;
};

// The kernel's THP policy for anonymous memory ("always", "madvise" or "never"), or "unavailable"
// when the kernel does not say (no /sys/kernel/mm/transparent_hugepage).
std::string transparent_huge_pages_mode();

// Bytes of [p, p + bytes) currently backed by huge pages (anonymous, or a file's 2 MiB folios
// mapped whole), from /proc/self/smaps (0 if unknown): exact when the range is a mapping of its
// own, else that mapping's count shared out by overlap.
std::size_t huge_page_backed_bytes(const void* p, std::size_t bytes);
// The same over several ranges, each huge page counted once.
std::size_t huge_page_backed_bytes(const std::vector<std::pair<const void*, std::size_t>>& ranges);

}  // namespace ember
