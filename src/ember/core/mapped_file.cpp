#include "ember/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ember/core/error.h"

namespace ember {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(path + ": cannot mmap: " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
#ifdef MADV_HUGEPAGE
    // Decode streams the weights once per token, and 4 KiB pages cost it (huge_pages.h). Where the
    // file system caches files in large folios (ext4 and xfs on recent kernels), faults through a
    // mapping advised so read the file ahead in 2 MiB folios and map each with one page-table
    // entry. Pages the file already has in cache keep their size: a file just written in small
    // pieces stays on 4 KiB pages until it leaves the cache. A hint: failure changes nothing.
    ::madvise(p, size_, MADV_HUGEPAGE);
#endif
  }
  ::close(fd);
}

bool MappedFile::release_pages(const void* p, size_t bytes) const {
  const auto* begin = static_cast<const uint8_t*>(p);
  if (data_ == nullptr || begin < data_ || bytes > size_ ||
      begin - data_ > static_cast<ptrdiff_t>(size_ - bytes)) {
    return false;
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::check_range(uint64_t offset, uint64_t length, const std::string& what) const {
  if (offset > size_ || length > size_ - offset) {
    throw Error(path_ + ": " + what + " spans bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + length) + ") but the file has only " +
                std::to_string(size_) + " bytes (truncated or corrupt file)");
  }
}

}  // namespace ember
