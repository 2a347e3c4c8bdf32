# The CUDA backend (-DEMBER_CUDA=ON): src/ember/backend/cuda/ as the object library ember_cuda,
# linked into ember_lib. Targets sm_90 (H100/H200) machine code plus compute_90 PTX, which newer
# GPUs compile at load. cuBLAS (from the toolkit) serves the large GEMMs; every other kernel is ours.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# The CUDA dialect follows CMAKE_CXX_STANDARD (20); CMake before 3.26 does not know nvcc's flag for
# it, which nvcc 12+ accepts.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

file(GLOB EMBER_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/ember/backend/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/src/ember/backend/cuda/*.cpp)
add_library(ember_cuda OBJECT ${EMBER_CUDA_SOURCES})
target_include_directories(ember_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(ember_cuda PRIVATE CUDA::cudart CUDA::cublas)
# NCCL (--tp on cuda: the partial sums' all-reduce on the GPUs) is loaded at run time
# (nccl_group.cpp); only its header is needed here, which the CUDA toolkit ships beside its own.
find_path(EMBER_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
if(EMBER_NCCL_INCLUDE_DIR)
  target_include_directories(ember_cuda PRIVATE ${EMBER_NCCL_INCLUDE_DIR})
  target_compile_definitions(ember_cuda PRIVATE EMBER_NCCL=1)
  target_link_libraries(ember_cuda PRIVATE ${CMAKE_DL_LIBS})
  target_link_libraries(ember_lib PUBLIC $<LINK_ONLY:${CMAKE_DL_LIBS}>)
else()
  message(STATUS "nccl.h not found: --tp with --backend cuda will say so")
endif()
target_compile_options(ember_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${EMBER_WARNINGS}>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
set_target_properties(ember_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)

target_sources(ember_lib PRIVATE $<TARGET_OBJECTS:ember_cuda>)
# Only make_backend (and the tests, see CMakeLists.txt) need to know: the rest of ember_lib compiles
# with the same flags as without CUDA (and hits the same compiler cache).
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/ember/backend/backend.cpp PROPERTIES
                            COMPILE_DEFINITIONS EMBER_CUDA=1)
target_link_libraries(ember_lib PUBLIC $<LINK_ONLY:CUDA::cudart> $<LINK_ONLY:CUDA::cublas>)

# The decode matvec kernels alone on a GPU (bench/cuda_matvec_bench.cpp): GB/s per product against
# the read-bandwidth probe, for each rows-per-warp variant. Built with the backend, whatever
# EMBER_BUILD_BENCH says (it needs nothing but the CUDA runtime).
add_executable(ember_cuda_matvec_bench ${CMAKE_SOURCE_DIR}/bench/cuda_matvec_bench.cpp)
target_include_directories(ember_cuda_matvec_bench PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_compile_options(ember_cuda_matvec_bench PRIVATE ${EMBER_WARNINGS})
target_link_libraries(ember_cuda_matvec_bench PRIVATE ember_lib CUDA::cudart)
