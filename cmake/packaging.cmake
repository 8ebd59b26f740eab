# `cmake --install` and the Debian package (CPack): binaries, the plugin ABI header, the
# systemd unit with its sysusers/tmpfiles entries, /etc/ferry/node.toml (a conffile) and the
# docs. ferryd finds its children in ../libexec/ferry beside itself.
include(GNUInstallDirs)

install(TARGETS ferryd ferryctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ferry-worker ferry-hookhost RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/ferry)
install(FILES include/ferry/plugin.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ferry)
install(FILES packaging/ferry.service packaging/ferry-http.socket packaging/ferry-grpc.socket
              packaging/ferry-metrics.socket DESTINATION lib/systemd/system)
install(FILES packaging/ferry.sysusers DESTINATION lib/sysusers.d RENAME ferry.conf)
install(FILES packaging/ferry.tmpfiles DESTINATION lib/tmpfiles.d RENAME ferry.conf)
# An absolute destination: /etc whatever the prefix (CPack installs into its staging root).
install(FILES packaging/node.toml DESTINATION /etc/ferry)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY examples/models examples/hooks DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ferry)
set(CPACK_PACKAGE_VENDOR "ferry")
set(CPACK_PACKAGE_CONTACT "ferry maintainers <ferry@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU inference server for multi-GPU hosts (KServe v2)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.36), libstdc++6 (>= 12), libdnnl2, libfmt9, libspdlog1.10, libseccomp2, libsystemd0, libtomlplusplus3, libgrpc++1.51, libprotobuf32, zlib1g, systemd")
# GPU workers also need the CUDA runtime libraries (cuBLAS) of the toolkit ferry was built
# with; NVIDIA ships them outside Debian, so they are documented, not declared.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/debian/conffiles;${PROJECT_SOURCE_DIR}/packaging/debian/postinst;${PROJECT_SOURCE_DIR}/packaging/debian/prerm;${PROJECT_SOURCE_DIR}/packaging/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
