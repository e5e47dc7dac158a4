# Writes generated/sweep_version.h with the commit checked out now: run at every build (the
# sweep_version target), so rows and tables name the commit the binary was built from, not the
# one CMake was configured at. configure_file leaves the file alone when nothing changed, so
# nothing recompiles then.
#   cmake -DSOURCE_DIR=... -DOUT=... -DPROJECT_VERSION=... -P cmake/version.cmake
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE SWEEP_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT SWEEP_GIT_COMMIT)
  set(SWEEP_GIT_COMMIT unknown)
endif()
configure_file(${SOURCE_DIR}/cmake/version.h.in ${OUT} @ONLY)
