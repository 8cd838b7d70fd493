# The portable release build (docs/release.md): every third-party library static, built by
# scripts/static-deps against Debian 11's glibc 2.31, with libstdc++ and libgcc static too, so
# the binary needs only glibc (NEEDED: libc, libm, libdl, libpthread, the dynamic loader). The
# toolchain file scripts/static-deps writes sets HPCBAKE_STATIC_DIR and the compilers:
#   cmake -S . -B build-x86_64 -DCMAKE_TOOLCHAIN_FILE=$(scripts/static-deps x86_64)/toolchain.cmake
# Defines the same targets the Debian build gets from find_package, so src/ does not change.
enable_language(C)
# A cross build runs its own programs (the man page generator, ctest) under qemu-user with the
# sysroot's dynamic loader.
if(CMAKE_CROSSCOMPILING AND NOT CMAKE_CROSSCOMPILING_EMULATOR)
  find_program(HPCBAKE_QEMU qemu-${CMAKE_SYSTEM_PROCESSOR}-static REQUIRED)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${HPCBAKE_QEMU} -L ${HPCBAKE_STATIC_DIR}/sysroot)
endif()
find_package(PkgConfig REQUIRED)
# The prefix first, before the compiler's own library path (which ends in the build host's).
link_directories(BEFORE ${HPCBAKE_STATIC_DIR}/prefix/lib)

# A pkg-config module as an imported target with its --static link line (the libraries each
# static archive itself needs, in order).
# Each -l must name an archive in the prefix or the sysroot: the compiler's own search path
# ends in the build host's library directory, where a missing archive would silently be
# replaced by the host's shared library.
function(hpcbake_static_module target module)
  pkg_check_modules(_hb REQUIRED ${module})
  set(dirs ${HPCBAKE_STATIC_DIR}/prefix/lib ${HPCBAKE_STATIC_DIR}/sysroot/usr/lib/${CMAKE_SYSTEM_PROCESSOR}-linux-gnu)
  foreach(lib IN LISTS _hb_STATIC_LIBRARIES)
    set(found FALSE)
    foreach(dir IN LISTS dirs)
      if(EXISTS ${dir}/lib${lib}.a)
        set(found TRUE)
      endif()
    endforeach()
    if(NOT found)
      message(FATAL_ERROR "${module}: lib${lib}.a is in neither of ${dirs}; rerun scripts/static-deps")
    endif()
  endforeach()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_hb_STATIC_INCLUDE_DIRS}"
                                             INTERFACE_LINK_LIBRARIES "${_hb_STATIC_LDFLAGS}")
  unset(_hb_FOUND CACHE)
endfunction()
hpcbake_static_module(CURL::libcurl libcurl)
hpcbake_static_module(LibArchive::LibArchive libarchive)
hpcbake_static_module(OpenSSL::Crypto libcrypto)
hpcbake_static_module(EXPAT::EXPAT expat)
hpcbake_static_module(PkgConfig::KMOD libkmod)
hpcbake_static_module(PkgConfig::LZMA liblzma)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h REQUIRED)

# libstdc++.a and libgcc_eh.a of g++ 12 call three functions glibc 2.31 lacks; the executable
# brings its own (glibc_compat.c says why each is safe). Linked as object files into every
# executable, after the static archives that need them.
add_library(hpcbake_glibc_compat OBJECT ${CMAKE_CURRENT_LIST_DIR}/glibc_compat.c)
set_target_properties(hpcbake_glibc_compat PROPERTIES POSITION_INDEPENDENT_CODE ON)
add_link_options(-static-libstdc++ -static-libgcc -pthread -Wl,--gc-sections -Wl,--as-needed -Wl,-z,relro,-z,now)
link_libraries("$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:$<TARGET_OBJECTS:hpcbake_glibc_compat>>")
add_compile_options(-ffunction-sections -fdata-sections)
# g++ 12 at -O3 warns of overlapping memcpy in inlined std::string concatenation that cannot
# happen (GCC bug 105329); the test builds (-O2, -Werror) keep the warning.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
