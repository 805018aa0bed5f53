# Shared build helpers: warnings, sanitizers and dspark_add_test().

function(dspark_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(DSPARK_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(DSPARK_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${DSPARK_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${DSPARK_SANITIZE})
  endif()
  # Shipped builds dispatch at run time (Highway); -march=native would tie the binary to this CPU.
endfunction()

# dspark_library(name SOURCES ... LIBS ...): one library per src/<folder>.
function(dspark_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_LIBS})
  dspark_target_defaults(${name})
endfunction()

# dspark_add_test(name SOURCES ... LIBS ... LABELS ...): a GoogleTest binary whose cases each
# become a ctest entry carrying the labels (unit, kernel, model, lossless, e2e, slow).
function(dspark_add_test name)
  if(NOT DSPARK_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE DSPARK_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                             DSPARK_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  dspark_target_defaults(${name})
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()

# dspark_make_pic(target): builds `target` and the static libraries it links to (its whole link
# closure, walked so that a new library is covered) as position-independent code, for the shared
# objects made from them (libdspark.so, the Python module). -fno-semantic-interposition keeps
# -fPIC code as fast as the executables' default -fPIE: calls between a library's own functions
# stay direct and inlinable. Safe to call more than once.
function(dspark_make_pic target)
  if(NOT TARGET ${target})
    return()
  endif()
  get_property(done GLOBAL PROPERTY DSPARK_PIC_DONE)
  if(${target} IN_LIST done)
    return()
  endif()
  set_property(GLOBAL APPEND PROPERTY DSPARK_PIC_DONE ${target})
  get_target_property(imported ${target} IMPORTED)
  get_target_property(type ${target} TYPE)
  if(imported OR NOT (type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "OBJECT_LIBRARY"))
    return()
  endif()
  set_property(TARGET ${target} PROPERTY POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${target} PRIVATE -fno-semantic-interposition)
  get_target_property(libs ${target} LINK_LIBRARIES)
  if(libs)
    foreach(lib IN LISTS libs)
      dspark_make_pic(${lib})
    endforeach()
  endif()
endfunction()

# dspark_preload_sanitizer(test...): tests whose process is not ours (Python loading the dspark
# module, a consumer program built by the package test) load our ASan-instrumented code into a
# program without the ASan runtime, which must then be preloaded. Their leak checks are off: the
# interpreter and the build tools keep memory until exit by design.
function(dspark_preload_sanitizer)
  if(NOT DSPARK_SANITIZE MATCHES "address")
    return()
  endif()
  # libstdc++ too: a program that does not link it (Python) loads it only after the runtime has
  # looked for the __cxa_throw it intercepts, and the first C++ exception would then abort.
  # gcc's runtime is libasan; clang's shared one (its UBSan included) is libclang_rt.asan.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(asan_name libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so)
  else()
    set(asan_name libasan.so)
  endif()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${asan_name}
                  OUTPUT_VARIABLE asan_runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE cxx_runtime OUTPUT_STRIP_TRAILING_WHITESPACE)
  foreach(t ${ARGN})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "LD_PRELOAD=${asan_runtime} ${cxx_runtime}"
                                                       "ASAN_OPTIONS=detect_leaks=0")
  endforeach()
endfunction()
