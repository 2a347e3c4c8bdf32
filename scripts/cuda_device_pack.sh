#!/usr/bin/env bash
# Packs what scripts/cuda_device_check.sh needs on a GPU machine that has the driver and the CUDA
# toolkit but not ember's build dependencies: the cuda build's binaries (stripped), the shared
# libraries they load that are not glibc's or CUDA's, and the part of the fixtures the device tests
# read. Run from the repository root after `cmake --preset cuda && cmake --build build-cuda
# --target ember ember_tests ember_cuda_matvec_bench`:
#   scripts/cuda_device_pack.sh BUILD_DIR FIXTURES_DIR OUT_DIR
# OUT_DIR gets bin/ (ember, ember_tests, lib/) and fixtures/ (a tree shaped like ../shared); then
#   scripts/cuda_device_check.sh OUT_DIR/bin OUT_DIR/fixtures
# The whole is ~60 MB: small enough to travel with a working tree to a lent machine.
set -euo pipefail
build=$(realpath "$1")
fixtures=$(realpath "$2")
out=$3
rm -rf "$out"
mkdir -p "$out/bin/lib" "$out/fixtures/models"
for b in ember ember_tests ember_cuda_matvec_bench; do
  strip -o "$out/bin/$b" "$build/$b"
done
# Libraries outside glibc and the CUDA toolkit (the GPU machine has those, in newer versions).
ldd "$build/ember" "$build/ember_tests" "$build/ember_cuda_matvec_bench" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libgcc_s.so*) ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libstdc++.so*) ;;
    *) cp -L "$lib" "$out/bin/lib/" ;;
  esac
done
m="$fixtures/models"
copy() {  # paths relative to the fixtures' models/
  for p in "$@"; do
    mkdir -p "$out/fixtures/models/$(dirname "$p")"
    cp -r "$m/$p" "$out/fixtures/models/$p"
  done
}
copy stories260K
mkdir -p "$out/fixtures/models/smollm2-135m-instruct"
cp "$m"/smollm2-135m-instruct/{config.json,tokenizer.json,tokenizer_config.json} \
  "$out/fixtures/models/smollm2-135m-instruct/" 2>/dev/null || true
for f in gemma2 phi3 qwen2 llama_rope_llama3; do
  copy family-zoo/$f.gguf family-zoo/$f.ids family-zoo/$f.f64ref.f32 family-zoo/$f.logits.f32
done
copy family-zoo/README.md
for f in q8_0 q4_k_m q6_k; do
  copy quant-zoo/zoo-$f.gguf quant-zoo/zoo-$f.f64ref.f32 quant-zoo/zoo-$f.logits.f32
done
copy quant-zoo/reference.json
for f in olmoe qwen2moe; do
  copy moe-zoo/$f.gguf moe-zoo/$f.ids moe-zoo/$f.f64ref.f32 moe-zoo/$f.logits.f32
done
du -sh "$out/bin" "$out/fixtures"
