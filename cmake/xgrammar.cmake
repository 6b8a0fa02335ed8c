# xgrammar's C++ core as a static library, built from the sources scripts/get-xgrammar.sh fetches
# (its own CMakeLists adds -Werror and LTO and wants its Python bindings; specd needs only the
# core, compiled with specd's flags so the sanitizer builds cover it too).
set(SPECD_XGRAMMAR_DIR ${CMAKE_SOURCE_DIR}/third_party/xgrammar-0.2.8
    CACHE PATH "xgrammar's sources (scripts/get-xgrammar.sh)")
if(NOT EXISTS ${SPECD_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h)
  message(FATAL_ERROR "xgrammar's sources are missing from ${SPECD_XGRAMMAR_DIR}: run "
                      "scripts/install-deps.sh (or scripts/get-xgrammar.sh)")
endif()
file(GLOB SPECD_XGRAMMAR_SOURCES ${SPECD_XGRAMMAR_DIR}/cpp/*.cc
     ${SPECD_XGRAMMAR_DIR}/cpp/support/*.cc ${SPECD_XGRAMMAR_DIR}/cpp/converter_ext/*.cc)
add_library(specd_xgrammar STATIC ${SPECD_XGRAMMAR_SOURCES})
target_include_directories(specd_xgrammar PUBLIC ${SPECD_XGRAMMAR_DIR}/include)
target_include_directories(specd_xgrammar SYSTEM PUBLIC ${SPECD_XGRAMMAR_DIR}/3rdparty/picojson
                           ${SPECD_XGRAMMAR_DIR}/3rdparty/dlpack/include)
target_compile_definitions(specd_xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0)
# Third-party code: its warnings are not ours to fix.
target_compile_options(specd_xgrammar PRIVATE -w -O3)
if(SPECD_SANITIZE OR SPECD_SANITIZE_THREAD OR SPECD_FUZZ)
  # Not instrumented in the sanitizer and fuzzing builds (they test specd's code; the library's
  # allocations are still seen by ASan's allocator): its template-heavy sources took ~10 minutes a
  # build under ASan with debug information, which CI's hour could not afford three times.
  set_property(TARGET specd_xgrammar PROPERTY COMPILE_OPTIONS -w -O2 -g0)
endif()
set_target_properties(specd_xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
target_link_libraries(specd_xgrammar PUBLIC Threads::Threads)
