#include "ember/core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <utility>

namespace ember {

namespace {

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

HugePageBuffer::HugePageBuffer(std::size_t bytes, bool prefault) {
  if (bytes == 0) return;
  const std::size_t size = round_up(bytes, kHugePageBytes);
  if constexpr (kHugePagesFromHeap) {
    data_ = static_cast<uint8_t*>(::operator new (bytes, std::align_val_t{kHugePageBytes}));
    std::memset(data_, 0, bytes);
    size_ = bytes;
    return;
  }
  // Over-reserve by one huge page and trim, so the region starts on a 2 MiB boundary (the kernel
  // can only back whole aligned 2 MiB ranges with a huge page).
  const std::size_t reserve = size + kHugePageBytes;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<uint8_t*>(p);
  auto* aligned =
      reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<std::uintptr_t>(base), kHugePageBytes));
  if (aligned > base) ::munmap(base, static_cast<std::size_t>(aligned - base));
  const std::size_t tail = static_cast<std::size_t>(base + reserve - (aligned + size));
  if (tail > 0) ::munmap(aligned + size, tail);
#ifdef MADV_HUGEPAGE
  ::madvise(aligned, size, MADV_HUGEPAGE);  // a hint: failure leaves ordinary pages
#endif
  data_ = aligned;
  size_ = size;
  if (prefault) {
    for (std::size_t i = 0; i < size; i += 4096) data_[i] = 0;
  }
}

void HugePageBuffer::release() {
  if (data_ == nullptr) return;
  if constexpr (kHugePagesFromHeap) {
    ::operator delete (data_, std::align_val_t{kHugePageBytes});
  } else {
    ::munmap(data_, size_);
  }
  data_ = nullptr;
  size_ = 0;
}

HugePageBuffer::~HugePageBuffer() {
  release();
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

uint8_t* HugePageArena::allocate(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  bytes = round_up(std::max<std::size_t>(bytes, 1), kAlign);
  if (bytes > kRegionBytes / 4 || kHugePagesFromHeap) {
    // Large matrices get their own region: no shared region is left mostly empty behind them.
    regions_.emplace_back(bytes);
    return regions_.back().data();
  }
  if (shared_ == SIZE_MAX || used_in_last_ + bytes > regions_[shared_].size()) {
    regions_.emplace_back(kRegionBytes);
    shared_ = regions_.size() - 1;
    used_in_last_ = 0;
  }
  uint8_t* p = regions_[shared_].data() + used_in_last_;
  used_in_last_ += bytes;
  return p;
}

std::size_t HugePageArena::reserved_bytes() const {
  std::size_t total = 0;
  for (const auto& r : regions_) total += r.size();
  return total;
}

bool HugePageArena::owns(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::any_of(regions_.begin(), regions_.end(), [&](const HugePageBuffer& r) {
    return b >= r.data() && b < r.data() + r.size();
  });
}

std::size_t HugePageArena::huge_backed_bytes() const {
  std::vector<std::pair<const void*, std::size_t>> ranges;
  for (const auto& r : regions_) ranges.emplace_back(r.data(), r.size());
  return huge_page_backed_bytes(ranges);
}

std::string transparent_huge_pages_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "unavailable";
  // The active choice is bracketed: "always [madvise] never".
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unavailable";
  return line.substr(open + 1, close - open - 1);
}

std::size_t huge_page_backed_bytes(const std::vector<std::pair<const void*, std::size_t>>& ranges) {
  // smaps says how much of each mapping is in huge pages, not where. The kernel merges adjacent
  // mappings with the same flags (two arena regions, or a region and the KV pool), so a mapping's
  // count is shared out over the ranges in proportion to their overlap with it: exact when each
  // range is its own mapping, an estimate otherwise, and never counting a huge page twice.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  double total = 0;
  std::size_t overlap = 0, length = 0;  // of the current mapping
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {  // a mapping line
      overlap = 0;
      length = hi - lo;
      for (const auto& [p, bytes] : ranges) {
        const auto b = reinterpret_cast<std::uintptr_t>(p), e = b + bytes;
        if (b < hi && e > lo) overlap += std::min<std::uintptr_t>(e, hi) - std::max(b, lo);
      }
      continue;
    }
    // Anonymous memory counts its huge pages as AnonHugePages, a file mapping as FilePmdMapped.
    const bool anon = line.rfind("AnonHugePages:", 0) == 0;
    if (overlap > 0 && (anon || line.rfind("FilePmdMapped:", 0) == 0)) {
      std::istringstream value(line.substr(14));
      std::size_t kb = 0;
      value >> kb;
      total += static_cast<double>(kb) * 1024.0 * static_cast<double>(overlap) /
               static_cast<double>(length);
    }
  }
  return static_cast<std::size_t>(total);
}

std::size_t huge_page_backed_bytes(const void* p, std::size_t bytes) {
  return huge_page_backed_bytes({{p, bytes}});
}

}  // namespace ember
