# Writes OUTPUT, a C++ file defining `const char* const SYMBOL` in NAMESPACE (default
# ember::server) with the bytes of INPUT (a web asset: the chat page `ember serve` serves, the
# trace page template), so that the binary needs no file at run time.
# Run as: cmake -DINPUT=... -DOUTPUT=... -DSYMBOL=... [-DNAMESPACE=...] -P embed_file.cmake
if(NOT DEFINED NAMESPACE)
  set(NAMESPACE ember::server)
endif()
file(READ "${INPUT}" content)
string(FIND "${content}" ")EMBER_ASSET\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )EMBER_ASSET\"")
endif()
file(WRITE "${OUTPUT}"
     "// Generated from ${INPUT} by cmake/embed_file.cmake: edit the asset, not this file.\n"
     "namespace ${NAMESPACE} {\n"
     "extern const char* const ${SYMBOL};\n"
     "const char* const ${SYMBOL} = R\"EMBER_ASSET(${content})EMBER_ASSET\";\n"
     "}  // namespace ${NAMESPACE}\n")
