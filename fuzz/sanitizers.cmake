# Included by the top-level CMakeLists.txt when ACTORD_FUZZ is on, before any library is defined: every object of
# that build dir gets AddressSanitizer, UndefinedBehaviorSanitizer (any report aborts) and libFuzzer's coverage
# instrumentation. Use a build dir of its own, configured with clang (fuzz/README.md):
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DACTORD_FUZZ=ON -DACTORD_WITH_CUDA=OFF
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "ACTORD_FUZZ needs clang (libFuzzer): configure with CC=clang CXX=clang++ in its own build dir")
endif()
# -O1: fast enough to fuzz, quick to compile; assertions stay on (Debug), so library assertions (nlohmann's on
# missing keys of const objects, for one) fire as crashes instead of silent undefined behaviour.
set(ACTORD_FUZZ_FLAGS -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=undefined -Wno-pass-failed)
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${ACTORD_FUZZ_FLAGS}>")
add_link_options(-fsanitize=address,undefined)
if(ACTORD_WITH_CUDA)
  message(FATAL_ERROR "ACTORD_FUZZ builds without CUDA: add -DACTORD_WITH_CUDA=OFF")
endif()
message(STATUS "actord: fuzz build (ASan, UBSan, libFuzzer coverage)")
