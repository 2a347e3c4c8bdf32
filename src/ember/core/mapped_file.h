// A read-only memory-mapped file. Weights are views into it (zero-copy), so it must outlive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ember {

class MappedFile {
 public:
  // Throws ember::Error naming `path` if it does not exist, is a directory, or cannot be mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops this process's pages of the whole pages inside [p, p + bytes), which must lie in this
  // mapping (returns false and does nothing otherwise). The mapping stays valid: a later read
  // faults the page back in from the file. For tensors copied out at load (converted, interleaved),
  // so their file pages do not stay resident beside the copy.
  bool release_pages(const void* p, size_t bytes) const;

  // Throws ember::Error("<path>: <what> ...") unless [offset, offset+length) lies inside the file.
  void check_range(uint64_t offset, uint64_t length, const std::string& what) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ember
