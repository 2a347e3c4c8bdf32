#include "ember/kv/kv_disk_tier.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace ember {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'E', 'M', 'B', 'E', 'R', 'K', 'V', '1'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t n_tokens;
  uint64_t fingerprint;
  uint64_t hash;
  uint64_t payload_bytes;
  uint64_t checksum;
};
static_assert(sizeof(Header) == 48);

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

uint64_t checksum_of(std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  const auto* t = reinterpret_cast<const uint8_t*>(tokens.data());
  return fnv1a64(payload, fnv1a64({t, tokens.size_bytes()}));
}

}  // namespace

uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t h) {
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

KvDiskTier::KvDiskTier(fs::path dir, int64_t capacity, uint64_t fingerprint)
    : dir_(std::move(dir)), capacity_(capacity), fingerprint_(fingerprint) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec)) {
    disable("cannot create directory: " + ec.message());
    return;
  }
  index_directory();
}

fs::path KvDiskTier::path_of(uint64_t hash) const {
  return dir_ / (hex16(fingerprint_) + "-" + hex16(hash) + ".kvb");
}

void KvDiskTier::index_directory() {
  // This fingerprint's entries, oldest modification first; others' files are left alone.
  const std::string prefix = hex16(fingerprint_) + "-";
  std::vector<std::pair<fs::file_time_type, Entry>> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != 16 + 1 + 16 + 4 || name.rfind(prefix, 0) != 0 || name.substr(33) != ".kvb") {
      continue;
    }
    uint64_t hash = 0;
    if (std::sscanf(name.c_str() + 17, "%16" SCNx64, &hash) != 1) continue;
    std::error_code size_ec, time_ec;
    const auto size = static_cast<int64_t>(e.file_size(size_ec));
    const auto time = e.last_write_time(time_ec);
    if (size_ec || time_ec) continue;
    found.push_back({time, Entry{hash, size}});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [time, entry] : found) {
    index_[entry.hash] = lru_.insert(lru_.end(), entry);
    ++stats_.entries;
    stats_.bytes += entry.bytes;
  }
}

void KvDiskTier::touch(uint64_t hash) {
  auto it = index_.find(hash);
  if (it != index_.end()) lru_.splice(lru_.end(), lru_, it->second);
}

void KvDiskTier::erase(uint64_t hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  std::error_code ec;
  fs::remove(path_of(hash), ec);
  stats_.bytes -= it->second->bytes;
  --stats_.entries;
  lru_.erase(it->second);
  index_.erase(it);
}

void KvDiskTier::disable(const std::string& why) {
  if (!stats_.disabled) {
    std::fprintf(stderr,
                 "[ember] warning: KV disk tier %s turned off (%s); going on with the RAM tier "
                 "and recomputation\n",
                 dir_.string().c_str(), why.c_str());
  }
  stats_.disabled = true;
}

bool KvDiskTier::put(uint64_t hash, std::span<const int32_t> tokens,
                     std::span<const uint8_t> payload) {
  if (stats_.disabled) return false;
  const int64_t size = static_cast<int64_t>(sizeof(Header) + tokens.size_bytes() + payload.size());
  if (size > capacity_) return false;
  erase(hash);
  while (stats_.bytes + size > capacity_ && !lru_.empty()) erase(lru_.front().hash);
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.n_tokens = static_cast<uint32_t>(tokens.size());
  h.fingerprint = fingerprint_;
  h.hash = hash;
  h.payload_bytes = payload.size();
  h.checksum = checksum_of(tokens, payload);
  const fs::path final_path = path_of(hash);
  fs::path tmp = final_path;
  tmp += ".tmp";
  bool ok = false;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) {
      out.write(reinterpret_cast<const char*>(&h), sizeof h);
      out.write(reinterpret_cast<const char*>(tokens.data()),
                static_cast<std::streamsize>(tokens.size_bytes()));
      out.write(reinterpret_cast<const char*>(payload.data()),
                static_cast<std::streamsize>(payload.size()));
      out.flush();
      ok = static_cast<bool>(out);
    }
  }
  std::error_code ec;
  if (ok) fs::rename(tmp, final_path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    ++stats_.write_failures;
    disable(ok ? "rename failed" : "write failed (disk full, read-only or deleted?)");
    return false;
  }
  index_[hash] = lru_.insert(lru_.end(), Entry{hash, size});
  ++stats_.entries;
  stats_.bytes += size;
  return true;
}

void KvDiskTier::drop_page_cache() {
  for (const Entry& e : lru_) {
    const int fd = ::open(path_of(e.hash).c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

bool KvDiskTier::get(uint64_t hash, std::span<const int32_t> tokens, std::span<uint8_t> payload) {
  if (stats_.disabled || index_.count(hash) == 0) return false;
  std::ifstream in(path_of(hash), std::ios::binary);
  if (!in) {  // gone (the directory deleted under us): a miss, not a bad file
    erase(hash);
    return false;
  }
  Header h{};
  std::vector<int32_t> stored(tokens.size());
  bool valid = false;
  if (in.read(reinterpret_cast<char*>(&h), sizeof h)) {
    valid = std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.version == kVersion &&
            h.fingerprint == fingerprint_ && h.hash == hash && h.n_tokens == tokens.size() &&
            h.payload_bytes == payload.size();
    valid = valid &&
            in.read(reinterpret_cast<char*>(stored.data()),
                    static_cast<std::streamsize>(tokens.size_bytes())) &&
            in.read(reinterpret_cast<char*>(payload.data()),
                    static_cast<std::streamsize>(payload.size()));
    // Nothing may follow the payload (a file longer than its header says is not ours either).
    valid = valid && in.peek() == std::char_traits<char>::eof();
    valid = valid && checksum_of(stored, payload) == h.checksum;
  }
  if (!valid) {
    ++stats_.rejected;
    erase(hash);
    return false;
  }
  if (!std::equal(stored.begin(), stored.end(), tokens.begin())) return false;  // a collision
  touch(hash);
  return true;
}

}  // namespace ember
