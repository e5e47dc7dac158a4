# The precompiled <torch/torch.h> (built once, by `models`) for the sources that include
# LibTorch, and for no others.
#
# Reusing the PCH costs a translation unit about 10 s before its first line (measured
# 2026-11-29 on the 2-core AMD EPYC VM, AVX2 only: an empty file 10.6 s with it; a test that
# includes no LibTorch header, zygote_test.cc, 43.7 s with it and 19.5 s without), and half the
# sources of the torch targets include no LibTorch header at all: the config, the runner's
# process plumbing, the allocator model, fit's analysis, most tests. Those skip it.
#
# A source includes LibTorch when it, or one of this project's headers it includes ("…", looked
# up beside the file, then from the source root and the generated folder, as the compiler
# does), includes <torch/…>, <ATen/…>, <c10/…> or <caffe2/…>. A wrong answer costs time only:
# every source includes what it uses, so it compiles with the PCH or without it.

# Sets `out` to ON when `file` includes LibTorch (directly or through our headers); remembered
# per file for the rest of the configure.
function(sweep_includes_torch file out)
  get_property(known GLOBAL PROPERTY "SWEEP_TORCH:${file}" SET)
  if(known)
    get_property(v GLOBAL PROPERTY "SWEEP_TORCH:${file}")
    set(${out} ${v} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "SWEEP_TORCH:${file}" OFF)  # an include cycle ends here
  file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  get_filename_component(dir "${file}" DIRECTORY)
  set(v OFF)
  foreach(line IN LISTS lines)
    if(line MATCHES "<(torch|ATen|c10|caffe2)/")
      set(v ON)
    elseif(line MATCHES "\"([^\"]+)\"")
      foreach(base "${dir}" "${PROJECT_SOURCE_DIR}" "${PROJECT_BINARY_DIR}/generated")
        if(EXISTS "${base}/${CMAKE_MATCH_1}")
          sweep_includes_torch("${base}/${CMAKE_MATCH_1}" v)
          break()
        endif()
      endforeach()
    endif()
    if(v)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "SWEEP_TORCH:${file}" ${v})
  set(${out} ${v} PARENT_SCOPE)
endfunction()

# `target` reuses models' PCH in its sources that include LibTorch; the others compile without
# it. OPTIMIZE flags: given to the sources without it only (a reused PCH must see the flags it
# was built with, -O3 among them), as the test binaries use it.
function(sweep_torch_pch target)
  cmake_parse_arguments(ARG "" "" "OPTIMIZE" ${ARGN})
  target_precompile_headers(${target} REUSE_FROM models)
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  foreach(src IN LISTS sources)
    get_filename_component(path "${src}" ABSOLUTE BASE_DIR "${source_dir}")
    if(NOT path MATCHES "\\.(cc|cpp)$")
      continue()
    endif()
    sweep_includes_torch("${path}" torch)
    if(NOT torch)
      set_source_files_properties("${src}" TARGET_DIRECTORY ${target} PROPERTIES
                                  SKIP_PRECOMPILE_HEADERS ON COMPILE_OPTIONS "${ARG_OPTIMIZE}")
    endif()
  endforeach()
endfunction()
