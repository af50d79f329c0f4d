# How modelcast installs as a package: the shared library's ABI version, the generated version
# header, the pkg-config file and the runpath of installed programs. Included from the top-level
# CMakeLists.txt before the targets are defined.

# While the major version is 0 every minor release may change the ABI, so the SONAME carries the
# minor too (libmodelcast.so.0.1, .so.0.2, ...): a program built against 0.1 is not loaded by 0.2.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(MODELCAST_SOVERSION "0.${PROJECT_VERSION_MINOR}")
else()
  set(MODELCAST_SOVERSION "${PROJECT_VERSION_MAJOR}")
endif()

# modelcast/version.h lives in the build tree's include/ and is installed next to the other headers.
set(MODELCAST_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/include)
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.h.in ${MODELCAST_GENERATED_INCLUDE_DIR}/modelcast/version.h @ONLY)
install(FILES ${MODELCAST_GENERATED_INCLUDE_DIR}/modelcast/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/modelcast)

# Relative install directories (GNUInstallDirs' defaults) let the pkg-config file and the
# programs' runpath be written relative to themselves, so `cmake --install --prefix X` and moving
# the installed tree both keep them right; /prefix below is only a placeholder for that prefix.
foreach(dir CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR CMAKE_INSTALL_SBINDIR CMAKE_INSTALL_INCLUDEDIR)
  if(IS_ABSOLUTE "${${dir}}")
    message(FATAL_ERROR "modelcast installs relocatably: give ${dir} relative to the prefix (got ${${dir}})")
  endif()
endforeach()

# pkg-config: the prefix is found from the .pc file's own place (${pcfiledir}).
file(RELATIVE_PATH MODELCAST_PC_PREFIX_FROM_PCDIR /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" MODELCAST_PC_PREFIX_FROM_PCDIR "${MODELCAST_PC_PREFIX_FROM_PCDIR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/modelcast.pc.in ${PROJECT_BINARY_DIR}/modelcast.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/modelcast.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/modelcast)

# Installed programs find the installed library relative to themselves (bin/ -> lib/), wherever
# the prefix is; tools/CMakeLists.txt applies it. The build tree keeps its own absolute runpath.
file(RELATIVE_PATH MODELCAST_BIN_TO_LIB /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${CMAKE_INSTALL_LIBDIR})
set(MODELCAST_PROGRAM_INSTALL_RPATH "$ORIGIN/${MODELCAST_BIN_TO_LIB}")
# The same for modelcastd, in sbin/, which need not sit at bin/'s depth (libexec/modelcast).
file(RELATIVE_PATH MODELCAST_SBIN_TO_LIB /prefix/${CMAKE_INSTALL_SBINDIR} /prefix/${CMAKE_INSTALL_LIBDIR})
set(MODELCAST_DAEMON_INSTALL_RPATH "$ORIGIN/${MODELCAST_SBIN_TO_LIB}")
