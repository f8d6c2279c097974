# `cmake --install build --prefix P`: the dtrain binary, the static libraries, the public headers and a
# CMake package, so that a project of your own can `find_package(dtrain)` and link `dtrain::dtrain`
# (examples/custom_model/). Layout under P:
#
#   bin/dtrain
#   lib/libdtrain_{core,proto,storage,kernels,models,comm,data,config,observe,checkpoint,optim,train,supervise,launcher}.a
#   include/dtrain/<repo path>.h           e.g. include/dtrain/models/model.h, include/dtrain/core/tensor.h,
#   include/dtrain/proto/<name>.pb.h         generated; the .proto schemas beside them
#   lib/cmake/dtrain/dtrainConfig.cmake    + dtrainConfigVersion.cmake, dtrainTargets*.cmake, FindNCCL/FindCUDNN
#
# include/dtrain is the include directory of the exported targets, so headers keep including each
# other by their repository path ("core/status.h") and a user's code does the same.
# Targets (namespace dtrain::): dtrain (everything: launcher, the runtime wings and all below them), and one per
# library: core proto storage kernels models comm data config observe checkpoint optim train launcher (plus options: definitions such as
# DT_HAVE_CUDA that the headers depend on). Dependencies are found again by dtrainConfig.cmake.
# Included at the end of the top-level CMakeLists.txt, once every target exists.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DT_INSTALL_INCLUDEDIR include/dtrain)  # = the INSTALL_INTERFACE include dir of dtrain_options
set(DT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)
set(_dt_folders core runtime kernels models data storage comm launcher)  # header folders (runtime/ holds the wings)
set(_dt_libs dtrain_core dtrain_proto dtrain_storage dtrain_kernels dtrain_models dtrain_comm dtrain_data dtrain_config
  dtrain_observe dtrain_checkpoint dtrain_optim dtrain_train dtrain_supervise dtrain_launcher)

# The umbrella target: dtrain::dtrain.
add_library(dtrain_all INTERFACE)
target_link_libraries(dtrain_all INTERFACE dtrain_launcher)
add_library(dtrain::dtrain ALIAS dtrain_all)
set_target_properties(dtrain_all PROPERTIES EXPORT_NAME dtrain)
set_target_properties(dtrain_options PROPERTIES EXPORT_NAME options)
foreach(_lib ${_dt_libs})
  string(REGEX REPLACE "^dtrain_" "" _short ${_lib})
  set_target_properties(${_lib} PROPERTIES EXPORT_NAME ${_short})
endforeach()

# The installed binary finds its shared libraries (e.g. /usr/local/cuda/lib64) where the build did.
set_target_properties(dtrain PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS dtrain RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${_dt_libs} dtrain_options dtrain_all EXPORT dtrainTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

foreach(_dir ${_dt_folders})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_dir}/ DESTINATION ${DT_INSTALL_INCLUDEDIR}/${_dir}
    FILES_MATCHING PATTERN "*.h")
endforeach()
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/ DESTINATION ${DT_INSTALL_INCLUDEDIR}/proto
  FILES_MATCHING PATTERN "*.pb.h" PATTERN "CMakeFiles" EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/proto/ DESTINATION ${DT_INSTALL_INCLUDEDIR}/proto
  FILES_MATCHING PATTERN "*.proto")

install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${DT_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dtrainConfig.cmake INSTALL_DESTINATION ${DT_INSTALL_CMAKEDIR} PATH_VARS CMAKE_INSTALL_BINDIR)
# A build links the static libraries of exactly the version it was compiled against; minor versions
# may change headers (0.x), so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake ${PROJECT_SOURCE_DIR}/cmake/FindCUDNN.cmake
  DESTINATION ${DT_INSTALL_CMAKEDIR})
