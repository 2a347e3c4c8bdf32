# Writes OUTPUT, a C++ file defining `const char* const SYMBOL` in ember::server with the bytes
# of INPUT (a web asset served by `ember serve`), so that the binary needs no file at run time.
# Run as: cmake -DINPUT=... -DOUTPUT=... -DSYMBOL=... -P embed_file.cmake
file(READ "${INPUT}" content)
string(FIND "${content}" ")EMBER_ASSET\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )EMBER_ASSET\"")
endif()
file(WRITE "${OUTPUT}"
     "// Generated from ${INPUT} by cmake/embed_file.cmake: edit the asset, not this file.\n"
     "namespace ember::server {\n"
     "extern const char* const ${SYMBOL};\n"
     "const char* const ${SYMBOL} = R\"EMBER_ASSET(${content})EMBER_ASSET\";\n"
     "}  // namespace ember::server\n")
