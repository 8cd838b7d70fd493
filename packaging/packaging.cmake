# Packaging: what a .deb / .rpm installs besides the binary, manifests and drivers data
# (installed by src/ and the top-level CMakeLists), and CPack's settings.
#   cmake --build build && (cd build && cpack -G DEB)   # or -G RPM, with rpmbuild installed
# Packages install under /usr whatever CMAKE_INSTALL_PREFIX is: the binary finds its data
# beside itself (util/datadir.hpp).

set(HPCBAKE_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})

# systemd: /usr/lib/systemd/system holds units shipped by packages on Debian, Ubuntu and RHEL.
install(FILES ${HPCBAKE_PACKAGING_DIR}/systemd/hpcbake-resume.service DESTINATION lib/systemd/system)
install(FILES ${HPCBAKE_PACKAGING_DIR}/completion/hpcbake.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME hpcbake)
install(FILES README.md ARCHITECTURE.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY packer/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/packer)
install(FILES examples/batch-pool.json examples/batch-pool-gallery.json docs/batch.md DESTINATION ${CMAKE_INSTALL_DOCDIR}/batch)

# The man page, generated from --help (help2man when installed).
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/hpcbake.1.gz
  COMMAND sh ${HPCBAKE_PACKAGING_DIR}/gen-manpage.sh $<TARGET_FILE:hpcbake> ${CMAKE_BINARY_DIR}/hpcbake.1.gz
  DEPENDS hpcbake ${HPCBAKE_PACKAGING_DIR}/gen-manpage.sh
  COMMENT "Generating hpcbake.1.gz from --help"
  VERBATIM)
add_custom_target(hpcbake_manpage ALL DEPENDS ${CMAKE_BINARY_DIR}/hpcbake.1.gz)
install(FILES ${CMAKE_BINARY_DIR}/hpcbake.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

set(CPACK_PACKAGE_NAME hpcbake)
set(CPACK_PACKAGE_VENDOR "hpcbake")
set(CPACK_PACKAGE_CONTACT "hpcbake maintainers <hpcbake@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Turn an Azure VM into a working GPU/InfiniBand machine, then into an image")
set(CPACK_PACKAGE_DESCRIPTION
    "hpcbake detects the VM, plans and installs the NVIDIA driver, Fabric Manager, DOCA-OFED or rdma-core \
for its Azure HPC/AI size, builds kernel modules for every kernel that will boot, verifies the machine \
against what its size promises, and seals it for capture into an image.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
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
set(CPACK_RPM_PACKAGE_LICENSE "Unspecified")
set(CPACK_RPM_PACKAGE_GROUP "System Environment/Base")
set(CPACK_RPM_PACKAGE_AUTOREQ ON)
set(CPACK_RPM_PACKAGE_SUGGESTS "dkms")
# Directories the distribution's own packages own: listing them would conflict.
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
    /usr/lib/systemd /usr/lib/systemd/system /usr/share/bash-completion
    /usr/share/bash-completion/completions /usr/share/man /usr/share/man/man1 /usr/share/doc)

set(CPACK_GENERATOR DEB)
find_program(HPCBAKE_RPMBUILD rpmbuild)
if(HPCBAKE_RPMBUILD)
  list(APPEND CPACK_GENERATOR RPM)
endif()
include(CPack)
