# The release version and the commit, read from git when the project is BUILT, not only when it
# is configured: `hpcbake --version` names the commit the binary was compiled from.
#
# Included from the top-level CMakeLists.txt, this adds the target hpcbake_version, always out of
# date, which runs this same file as a script (cmake -P) on every build. The script asks
# scripts/version and rewrites ${CMAKE_BINARY_DIR}/generated/cli/build_version.hpp only when its
# text changes, so a build with nothing new recompiles nothing and a new commit recompiles one
# file: src/cli/version.cpp, the only one that includes the header (src/CMakeLists.txt makes
# hpcbake_cli depend on this target). The configure-time build::version (PROJECT_VERSION, in
# util/build_config.hpp) stays as it was.
if(CMAKE_SCRIPT_MODE_FILE)
  # Script mode: cmake -DSOURCE_DIR=<source tree> -DOUTPUT=<header> -P cmake/version.cmake
  execute_process(COMMAND "${SOURCE_DIR}/scripts/version"
                  OUTPUT_VARIABLE version ERROR_VARIABLE why RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND "${SOURCE_DIR}/scripts/version" --commit
                  OUTPUT_VARIABLE commit ERROR_VARIABLE why2 RESULT_VARIABLE rc2 OUTPUT_STRIP_TRAILING_WHITESPACE)
  # Both go into C++ string literals: only the characters a version or a hash is made of.
  if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT version MATCHES "^[0-9A-Za-z][0-9A-Za-z.+~_-]*$"
     OR NOT commit MATCHES "^([0-9a-f]+|unknown)$")
    message(FATAL_ERROR "scripts/version said '${version}' (exit ${rc}) and --commit '${commit}' (exit ${rc2}): "
                        "${why}${why2}hint: set HPCBAKE_VERSION to a version (1.2.3) when building outside git")
  endif()
  string(CONCAT text
         "#pragma once\n"
         "// Generated at build time by cmake/version.cmake from scripts/version: do not edit.\n"
         "namespace hpcbake::build {\n"
         "inline constexpr const char* release_version = \"${version}\";\n"
         "inline constexpr const char* commit = \"${commit}\";\n"
         "} // namespace hpcbake::build\n")
  file(WRITE "${OUTPUT}.tmp" "${text}")
  file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
  file(REMOVE "${OUTPUT}.tmp")
else()
  set(HPCBAKE_VERSION_HEADER "${CMAKE_BINARY_DIR}/generated/cli/build_version.hpp")
  add_custom_target(hpcbake_version
    COMMAND "${CMAKE_COMMAND}" "-DSOURCE_DIR=${CMAKE_SOURCE_DIR}" "-DOUTPUT=${HPCBAKE_VERSION_HEADER}"
            -P "${CMAKE_CURRENT_LIST_FILE}"
    BYPRODUCTS "${HPCBAKE_VERSION_HEADER}"
    COMMENT "Reading the version from git (scripts/version)"
    VERBATIM)
endif()
