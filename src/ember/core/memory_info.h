// What the machine's memory holds free: MemAvailable of /proc/meminfo (free memory plus the page
// cache the kernel can reclaim, the mapped weights' file pages included).
#pragma once

#include <cstdint>

namespace ember {

// MemAvailable in bytes; 0 when unknown (no /proc/meminfo).
int64_t available_memory_bytes();

}  // namespace ember
