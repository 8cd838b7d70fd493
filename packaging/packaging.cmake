# Packaging: what a .deb / .rpm installs besides the binary, manifests and drivers data
# (installed by src/ and the top-level CMakeLists), and CPack's settings.
#   cmake --build build && (cd build && cpack -G DEB)   # or -G RPM, with rpmbuild installed
# Packages install under /usr whatever CMAKE_INSTALL_PREFIX is: the binary finds its data
# beside itself (util/datadir.hpp).

set(HPCBAKE_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})

# systemd: /usr/lib/systemd/system holds units shipped by packages on Debian, Ubuntu and RHEL.
install(FILES ${HPCBAKE_PACKAGING_DIR}/systemd/hpcbake-resume.service DESTINATION lib/systemd/system)
# The health units: packaged, not enabled; `hpcbake seal` writes and enables them in the image.
install(FILES ${HPCBAKE_PACKAGING_DIR}/systemd/hpcbake-verify-boot.service
              ${HPCBAKE_PACKAGING_DIR}/systemd/hpcbake-verify-periodic.service
              ${HPCBAKE_PACKAGING_DIR}/systemd/hpcbake-verify.timer DESTINATION lib/systemd/system)
install(FILES ${HPCBAKE_PACKAGING_DIR}/completion/hpcbake.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME hpcbake)
# The guides, laid out as in the source tree so that every relative link resolves in the
# installed copy (share/doc/hpcbake in the tarball, /usr/share/doc/hpcbake from a package):
# README.md, ARCHITECTURE.md, LICENSE, docs/ (the manual and every guide the README, the manual
# and --help link), the manifest schema the manual links, packer/ and examples/ (below).
# tests/cli/test_cli_packaging.py (ShippedDocs) installs the tree and follows every link.
install(FILES README.md ARCHITECTURE.md LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(FILES manifests/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}/manifests)
# /usr/share/doc/hpcbake/copyright (Debian Policy 12.5) in the machine-readable format
# (https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/): Apache-2.0, with LICENSE's
# own notice (its appendix) and, as Debian asks instead of the full text (lintian's
# copyright-file-contains-full-apache-2-license), where the full text is. The project names no
# copyright holder beyond its contributors (LICENSE's appendix is the template).
file(READ ${PROJECT_SOURCE_DIR}/LICENSE _hb_license)
string(REGEX MATCH "Licensed under the Apache License.*limitations under the License\\." _hb_notice "${_hb_license}")
if(NOT _hb_notice)
  message(FATAL_ERROR "LICENSE has no \"Licensed under the Apache License ... limitations under the License.\" notice")
endif()
string(REGEX REPLACE "\n[ \t]*" "\n " _hb_notice " ${_hb_notice}") # continuation lines: one space first
string(REPLACE "\n \n" "\n .\n" _hb_notice "${_hb_notice}")             # a blank line is " ."
string(CONCAT _hb_copyright "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
       "Upstream-Name: hpcbake\n\nFiles: *\nCopyright: the hpcbake contributors\nLicense: Apache-2.0\n\n"
       "License: Apache-2.0\n${_hb_notice}\n .\n The full text of the license is LICENSE, beside this file; on Debian\n"
       " systems it is also in /usr/share/common-licenses/Apache-2.0.\n")
file(WRITE ${CMAKE_BINARY_DIR}/copyright "${_hb_copyright}")
install(FILES ${CMAKE_BINARY_DIR}/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
if(HPCBAKE_STATIC_DIR)
  # The portable build links third-party code statically: its licenses travel with it, one
  # section per Debian source package built (its debian/copyright), glibc and gcc's included.
  file(GLOB _hb_copyrights "${HPCBAKE_STATIC_DIR}/licenses/*.copyright")
  list(SORT _hb_copyrights)
  file(READ "${HPCBAKE_STATIC_DIR}/versions" _hb_versions)
  set(_hb_third_party "Third-party software in this build of hpcbake\n\n"
      "The hpcbake binary links these statically, built from Debian's source packages (versions below);\n"
      "glibc is linked dynamically. Each section is the package's debian/copyright file.\n\n${_hb_versions}\n")
  foreach(_f IN LISTS _hb_copyrights)
    get_filename_component(_n "${_f}" NAME_WE)
    file(READ "${_f}" _text)
    string(APPEND _hb_third_party "==============================================================================\n"
           "${_n}\n==============================================================================\n${_text}\n")
  endforeach()
  file(WRITE "${CMAKE_BINARY_DIR}/THIRD-PARTY-LICENSES" "${_hb_third_party}")
  install(FILES "${CMAKE_BINARY_DIR}/THIRD-PARTY-LICENSES" DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()
install(DIRECTORY packer/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/packer)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
install(FILES ${HPCBAKE_PACKAGING_DIR}/kubernetes/runtimeclass-nvidia.yaml DESTINATION ${CMAKE_INSTALL_DOCDIR}/kubernetes)

# The man page, generated from docs/manual.md (the one reference), with the binary's version.
# A cross build runs the binary through its emulator (qemu-user, from the toolchain file).
set(_hb_manpage_bin $<TARGET_FILE:hpcbake>)
if(CMAKE_CROSSCOMPILING_EMULATOR)
  list(JOIN CMAKE_CROSSCOMPILING_EMULATOR " " _hb_emu)
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/hpcbake-emulated
       CONTENT "#!/bin/sh\nexec ${_hb_emu} $<TARGET_FILE:hpcbake> \"$@\"\n"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  set(_hb_manpage_bin ${CMAKE_BINARY_DIR}/hpcbake-emulated)
endif()
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/hpcbake.1.gz
  COMMAND sh ${HPCBAKE_PACKAGING_DIR}/gen-manpage.sh ${_hb_manpage_bin} ${PROJECT_SOURCE_DIR}/docs/manual.md
          ${CMAKE_BINARY_DIR}/hpcbake.1.gz
  DEPENDS hpcbake ${HPCBAKE_PACKAGING_DIR}/gen-manpage.sh ${HPCBAKE_PACKAGING_DIR}/manual-to-man.py
          ${PROJECT_SOURCE_DIR}/docs/manual.md
  COMMENT "Generating hpcbake.1.gz from docs/manual.md"
  VERBATIM)
add_custom_target(hpcbake_manpage ALL DEPENDS ${CMAKE_BINARY_DIR}/hpcbake.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/hpcbake.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# The portable build's SBOM (SPDX 2.3 JSON, docs/release.md "SBOM"): hpcbake and every library it
# links statically, from scripts/static-deps' own records (its versions file, each package's
# debian/copyright, the mirror's Sources index it fetched from). scripts/release also puts it
# beside the tarball.
if(HPCBAKE_STATIC_DIR)
  if(HPCBAKE_PACKAGE_VERSION)
    set(_hb_sbom_version ${HPCBAKE_PACKAGE_VERSION})
  else()
    set(_hb_sbom_version ${PROJECT_VERSION})
  endif()
  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/hpcbake.spdx.json
    COMMAND python3 ${HPCBAKE_PACKAGING_DIR}/sbom.py --static-dir ${HPCBAKE_STATIC_DIR}
            --version ${_hb_sbom_version} --arch ${CMAKE_SYSTEM_PROCESSOR} --binary ${_hb_manpage_bin}
            --compiler-version ${CMAKE_CXX_COMPILER_VERSION} --out ${CMAKE_BINARY_DIR}/hpcbake.spdx.json
    DEPENDS hpcbake ${HPCBAKE_PACKAGING_DIR}/sbom.py ${HPCBAKE_STATIC_DIR}/versions
    COMMENT "Generating hpcbake.spdx.json from scripts/static-deps' records"
    VERBATIM)
  add_custom_target(hpcbake_sbom ALL DEPENDS ${CMAKE_BINARY_DIR}/hpcbake.spdx.json)
  install(FILES ${CMAKE_BINARY_DIR}/hpcbake.spdx.json DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()

set(CPACK_PACKAGE_NAME hpcbake)
set(CPACK_PACKAGE_VENDOR "hpcbake")
# The project publishes no contact address (README.md, LICENSE): the Maintainer field (Debian
# Policy 5.6.2: a name and an email address) gets an address under RFC 2606's reserved .invalid
# top-level domain, which no mail reaches and no one can register. Who publishes packages sets
# their own: -DHPCBAKE_PACKAGE_CONTACT="Name <address>".
set(HPCBAKE_PACKAGE_CONTACT "hpcbake maintainers <maintainers@hpcbake.invalid>"
    CACHE STRING "The packages' Maintainer/Packager: a name and an email address")
set(CPACK_PACKAGE_CONTACT "${HPCBAKE_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Turn an Azure VM into a working GPU/InfiniBand machine, then into an image")
set(CPACK_PACKAGE_DESCRIPTION
    "hpcbake detects the VM, plans and installs the NVIDIA driver, Fabric Manager, DOCA-OFED or rdma-core \
for its Azure HPC/AI size, builds kernel modules for every kernel that will boot, verifies the machine \
against what its size promises, and seals it for capture into an image.")
# scripts/release passes the release version (git describe, made a valid .deb and .rpm version).
if(HPCBAKE_PACKAGE_VERSION)
  set(CPACK_PACKAGE_VERSION ${HPCBAKE_PACKAGE_VERSION})
else()
  set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
endif()
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

# .deb: dependencies from the binary's shared libraries (dpkg-shlibdeps), so a package built
# on Ubuntu 22.04 depends on Ubuntu 22.04's library packages: build on the target distro.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dkms, kmod, makeself")

# .rpm: rpmbuild's automatic requires find the shared libraries the same way.
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_LICENSE "Apache-2.0")
set(CPACK_RPM_PACKAGE_GROUP "System Environment/Base")
set(CPACK_RPM_PACKAGE_AUTOREQ ON)
set(CPACK_RPM_PACKAGE_SUGGESTS "dkms")
# Directories the distribution's own packages own: listing them would conflict.
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
    /usr/lib/systemd /usr/lib/systemd/system /usr/share/bash-completion
    /usr/share/bash-completion/completions /usr/share/man /usr/share/man/man1 /usr/share/doc)

if(HPCBAKE_STATIC_DIR)
  # The portable build needs glibc only, at the floor packaging/static/glibc-floor states (a
  # test checks the binary against it): no dpkg-shlibdeps, which cannot read a foreign
  # architecture's binary; rpmbuild's automatic requires read the ELF of either architecture.
  file(STRINGS ${HPCBAKE_PACKAGING_DIR}/static/glibc-floor _hb_floor LIMIT_COUNT 1 REGEX "^[0-9]")
  string(REGEX MATCH "^[0-9.]+" _hb_floor "${_hb_floor}")
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= ${_hb_floor})")
  if(CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
  else()
    set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
  endif()
  set(CPACK_RPM_PACKAGE_ARCHITECTURE ${CMAKE_SYSTEM_PROCESSOR})
  # CPack strips with the toolchain's strip; rpmbuild's own post-install steps would run the
  # build machine's strip on a foreign binary.
  set(CPACK_RPM_SPEC_MORE_DEFINE "%define __os_install_post %{nil}\n%define debug_package %{nil}")
endif()

set(CPACK_GENERATOR DEB)
find_program(HPCBAKE_RPMBUILD rpmbuild)
if(HPCBAKE_RPMBUILD)
  list(APPEND CPACK_GENERATOR RPM)
endif()
include(CPack)
