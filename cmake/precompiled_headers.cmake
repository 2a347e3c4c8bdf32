# Precompiled headers. On the 2-core CI machines parsing the same standard headers (and gtest in
# every test file) again took a third or more of a small file's compile. Only what nearly every
# file includes is precompiled: CLI11 and nlohmann/json, though slow to parse, define objects and
# functions that each file would then compile again (a trivial file took 8 s with them, 1 s with
# the standard headers alone), so files that use them still include them themselves.
# -DEMBER_PCH=OFF builds without (a check that each file includes what it uses).
option(EMBER_PCH "Precompile the standard headers (and gtest for the tests)" ON)

set(EMBER_PCH_STD_HEADERS
    <algorithm> <atomic> <chrono> <cmath> <cstddef> <cstdint> <cstdio> <cstdlib> <cstring>
    <filesystem> <fstream> <functional> <map> <memory> <mutex> <optional> <random> <set> <span>
    <sstream> <string> <string_view> <thread> <unordered_map> <utility> <vector>)

# ember_pch(<target> [<header>...]): the standard set plus the given headers.
function(ember_pch target)
  if(NOT EMBER_PCH OR EMBER_FUZZ)
    return()  # the fuzz build compiles the cpu kernels with other sanitizer flags than the rest
  endif()
  target_precompile_headers(${target} PRIVATE ${EMBER_PCH_STD_HEADERS} ${ARGN})
endfunction()
