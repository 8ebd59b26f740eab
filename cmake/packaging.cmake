# `cmake --install` and the Debian packages (CPack): `ferry` holds the binaries, the plugin ABI
# header, the systemd unit with its sysusers/tmpfiles entries, /etc/ferry/node.toml (a
# conffile) and the docs; `ferry-cuda` holds the CUDA backend module alone, so a CPU host
# installs no CUDA. ferryd finds its children in ../libexec/ferry beside itself, a worker its
# backend modules in ../../lib/ferry/backends (worker/backends/backend_module.h).
include(GNUInstallDirs)
set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME ferry)

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
# Debian's copyright file and changelog in each package's doc directory (Policy 12.5, 12.7;
# a native package's changelog is changelog.gz), and the manual pages, compressed.
set(packaging_out ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${packaging_out})
foreach(source debian/changelog man/ferryd.8 man/ferryctl.1)
  get_filename_component(leaf ${source} NAME)
  execute_process(COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/packaging/${source}
                  OUTPUT_FILE ${packaging_out}/${leaf}.gz)
endforeach()
set(changelog ${packaging_out}/changelog.gz)
install(FILES packaging/debian/copyright ${changelog} DESTINATION share/doc/ferry)
install(FILES ${packaging_out}/ferryd.8.gz DESTINATION share/man/man8)
install(FILES ${packaging_out}/ferryctl.1.gz DESTINATION share/man/man1)
if(FERRY_HAVE_CUDA)
  install(TARGETS ferry_cuda_module LIBRARY DESTINATION lib/ferry/backends COMPONENT cuda)
  install(FILES packaging/debian/copyright ${changelog} DESTINATION share/doc/ferry-cuda
          COMPONENT cuda)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ferry)
if(FERRY_HAVE_CUDA)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
endif()
set(CPACK_PACKAGE_NAME ferry)
set(CPACK_PACKAGE_VENDOR "ferry")
set(CPACK_PACKAGE_CONTACT "ferry maintainers <ferry@ferry.invalid>")
# Each package's description: its first line is the synopsis (CPack indents the rest).
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://ferry.invalid/")

# ferry: Depends from dpkg-shlibdeps over every ELF file (so a new library cannot be
# forgotten), plus what the maintainer scripts and the unit need.
set(CPACK_DEBIAN_FERRY_PACKAGE_NAME ferry)
set(CPACK_DEBIAN_FERRY_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_FERRY_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_FERRY_PACKAGE_DEPENDS "systemd, procps")  # procps: the unit's ExecReload=/bin/kill
set(CPACK_DEBIAN_FERRY_DESCRIPTION
    "GPU inference server for multi-GPU hosts (KServe v2)
ferryd supervises one ferry-worker per GPU (or CPU worker) and sandboxed
ferry-hookhost processes that speak KServe v2 over HTTP and gRPC. It runs
CPU workers as it is; GPU workers need the ferry-cuda package.")
set(CPACK_DEBIAN_FERRY_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/packaging/debian/conffiles;${PROJECT_SOURCE_DIR}/packaging/debian/postinst;${PROJECT_SOURCE_DIR}/packaging/debian/prerm;${PROJECT_SOURCE_DIR}/packaging/debian/postrm")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

# ferry-cuda: cuBLAS and the CUDA runtime come from NVIDIA's repository, which dpkg-shlibdeps
# knows nothing of, so Depends names ferry of this very build (the module refuses any other)
# and the C library; Recommends names NVIDIA's package of the cuBLAS it was built against.
# The driver (libcuda.so.1) is the host's.
if(FERRY_HAVE_CUDA)
  set(cuda_series "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME ferry-cuda)
  set(CPACK_DEBIAN_CUDA_FILE_NAME DEB-DEFAULT)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "ferry (= ${PROJECT_VERSION}), libc6 (>= 2.34)")
  set(CPACK_DEBIAN_CUDA_PACKAGE_RECOMMENDS "libcublas-${cuda_series}")
  set(CPACK_DEBIAN_CUDA_DESCRIPTION
      "CUDA backend for the ferry inference server
libferry_cuda.so, loaded only by a ferry-worker whose device is a GPU.
Built against CUDA ${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}: its cuBLAS must be on the loader's path
and the NVIDIA driver must support that CUDA version.")
endif()
include(CPack)
