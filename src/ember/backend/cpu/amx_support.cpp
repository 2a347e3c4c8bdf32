#include "ember/backend/cpu/amx_support.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ember::cpu {
namespace {

// Linux's arch_prctl codes (asm/prctl.h) and the XSAVE feature number of the tile data.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// CPUID.(EAX=7,ECX=0):EDX bits.
constexpr unsigned kAmxBf16Bit = 1u << 22;
constexpr unsigned kAmxTileBit = 1u << 24;
constexpr unsigned kAmxInt8Bit = 1u << 25;

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

std::string check_amx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return "CPUID leaf 7 is missing";
  if ((edx & kAmxTileBit) == 0) return "this CPU has no AMX-TILE";
  if ((edx & kAmxBf16Bit) == 0) return "this CPU has no AMX-BF16";
  if ((edx & kAmxInt8Bit) == 0) return "this CPU has no AMX-INT8";
  unsigned ecx1 = 0, edx1 = 0;
  __get_cpuid(1, &eax, &ebx, &ecx1, &edx1);
  if ((ecx1 & bit_OSXSAVE) == 0) return "the OS has not enabled XSAVE";
  const uint64_t tile_state = (uint64_t{1} << 17) | (uint64_t{1} << 18);
  if ((read_xcr0() & tile_state) != tile_state) return "the OS does not save AMX tile state (XCR0)";
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return "Linux refused the AMX tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM)";
  }
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 ||
      (granted & (1ul << kXfeatureXtiledata)) == 0) {
    return "Linux did not grant the AMX tile-data permission";
  }
  return "";
}

}  // namespace

const std::string& amx_unavailable_reason() {
  static const std::string reason = check_amx();
  return reason;
}

bool cpu_has_amx_tiles() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx & kAmxTileBit) != 0;
}

bool amx_available() {
  return amx_unavailable_reason().empty();
}

}  // namespace ember::cpu
